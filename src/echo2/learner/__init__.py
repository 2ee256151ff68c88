"""The learner: one process (or torchrun ranks) that takes verified groups, trains and publishes.

* ``loop.py`` — the learner loop (the same for every protocol): batches, audits, a step, a
  publish, evaluations, checkpoints, utilization; ``tally.py`` — a step's metrics summed;
* ``trainer.py`` — one learner step from a batch of groups; ``logprobs.py`` — completion
  log-probs recomputed with the sampler's batch layout; ``precision.py`` — fp32 master weights
  and the autocast a forward runs in;
* ``objectives/`` — the losses (GRPO, Dr.GRPO, DAPO, GSPO, one's own), off-policy corrections
  and EchoClip;
* ``update.py`` — the one place gradients become weights (clip, a non-finite norm refused,
  AdamW); ``optimizer.py`` — AdamW warm-started from a checkpoint's state;
* ``verification.py`` — audits of submitted groups under their own version (log-probs and
  draws), at a per-worker adaptive rate; ``version_cache.py`` — the last S + 1 versions' weights
  for those audits;
* ``dynamic_sampling.py`` — DAPO's dynamic sampling;
* ``distributed.py`` — data-parallel learner ranks (replicate or FSDP2);
* ``evaluations.py`` — where held-out evaluation runs (inline, an evaluator process, after);
* ``checkpoint.py`` — atomic checkpoints; ``interrupts.py`` — SIGTERM and Ctrl-C held until the
  step in hand is done.

**Audits.** Nothing the learner trains on rests on a worker's word alone: the rewards are the
coordinator's (:mod:`echo2.coordinator`); what remains a worker's word, the **behaviour log-probs**
and the **version** it sampled with, is audited. An audit (``verification.py``) recomputes a group's
log-probs under the policy of the group's *own* version, not the learner's current one: the learner
keeps the parameters the last S + 1 published versions carried (``version_cache.py``; CPU clones in
``broadcast.dtype``, a LoRA run's adapter only), so claiming an older version within the staleness
window hides nothing (a group older than that is stale and never trained on). The audit model is one
scratch copy of the policy, made once, built like a worker's sampler: parameters in ``model.dtype``,
no autocast, a LoRA adapter merged into a plain copy (``MergedCopy``); each audited version is loaded
into it. A mean absolute difference above ``verification.logprob_tolerance`` nats/token fails the
audit, and so does one token beyond ``LOG_RATIO_LIMIT`` nats, or (``verification.check_draws``) a token
that is not the one its lease's draws pick, within ``verification.draw_tolerance``
(:mod:`echo2.model.draws`). **Audit rates** are per worker: a new worker's first
``verification.probation_groups`` groups are all audited; after that every clean audit multiplies its
rate by ``verification.audit_decay``, down to ``verification.audit_floor``. A worker re-registering
starts over on probation. Each step logs ``audit_rate_mean`` (the mean probability its groups were
audited with), ``audited_groups`` and ``audit_seconds`` (audits plus keeping the versions), and
``reward_seconds`` (the coordinator's scoring time so far). A worker that fails an audit is
quarantined by the coordinator (:mod:`echo2.coordinator`).

**Distributed learner (torchrun).** ``torchrun --standalone --nproc-per-node N -m echo2.cli train ...``
starts N learner ranks (``learner.device=cuda`` puts each on its own GPU, NCCL; on CPU they use gloo).
Rank 0 alone hosts the coordinator, starts the workers, takes batches, verifies, evaluates, publishes
and checkpoints; it sends each step's batch to the other ranks (``Learner.step`` announces it,
``distributed.follow`` runs it; ``launch/ranks.py`` builds the learner alike on every rank), and every
rank trains on every N-th of the sequences that run through the model, with the step's global
normalisers, so the ranks' gradients sum to the single-process gradient (tested: 2 gloo processes make
the 1-process update to 1e-6). ``learner.sharding``: ``replicate`` — every rank holds the model and
AdamW; one all-reduce of a flat gradient buffer per optimizer update (DDP-style). ``fsdp`` — FSDP2
``fully_shard`` on every decoder layer and the root: parameters, gradients and AdamW states sharded.
FSDP averages gradients over ranks, so each rank's loss is scaled by N; a rank with fewer
micro-batches runs empty passes so that the collectives line up. Rank 0 keeps a whole copy of the
policy (refreshed from the shards after each step) to evaluate, verify and publish, and checkpoints
gather AdamW's state whole, so checkpoints and resume are the same as a single process's. Tested on
CPU with gloo; on GPUs it is the same code with NCCL but has not been run on GPUs yet. Every rank
reads the model (and, on ``--resume``, the checkpoint) from the same path, so multi-node runs need a
shared filesystem.

**LoRA runs.** With ``learner.lora.enabled`` the learner wraps its policy in a peft LoRA adapter
(``learner.lora``: rank, alpha, dropout, target modules): the base weights are frozen and AdamW holds
only the adapter (a fresh one: the moments saved beside the model belong to the full weights). Every
version then carries only the adapter's ``lora_A``/``lora_B`` tensors (``Manifest.kind = "lora"``);
the run spec gives workers the adapter's shape, each wraps its own copy of the base model in the same
adapter and copies each version's tensors into it, then re-merges it into a plain copy of its base
(``lora.MergedCopy``: ``W + (alpha / r) B A`` computed from the frozen base, never from the previous
merge) and samples from that copy — an unmerged adapter doubles decoding time on a CPU. The learner
trains unmerged and evaluates on a merged copy too; the two computations agree up to one rounding of
the merged weight to ``model.dtype`` (on SmolLM2 in bf16 their mean log-prob gap was well inside the
recipe's verification tolerance, ``0.3`` nats/token). A worker refuses a payload of the wrong kind.
Checkpoints are peft adapter folders that ``load_model`` puts back on their base (``echo2 eval``,
``--resume``). Bytes and broadcast time, full vs LoRA: ``docs/benchmarks.md``.

**Importance weighting.** Workers send the log-prob of every sampled token under
``softmax(logits / T)``; the learner recomputes the same quantity with the same left-padded layout and
position ids (``logprobs.py``), so at ``S = 0`` the ratio is 1 up to float error (tested:
|ratio − 1| < 2e-3). The loss clips the ratio PPO style and, for negative advantages, truncates it at
``learner.ratio_cap`` (dual clip); with ``learner.correction=decoupled`` it clips against the
learner's policy at the start of the step and weights by the truncated behaviour ratio (AReaL);
``none`` clips against that policy with no weight (a baseline for staleness studies,
``bench/correction.py``). Objectives, corrections and EchoClip: ``docs/objectives.md``.

**Learner utilization** (``loop.py``): ``busy`` = time in ``Learner.step`` and publishing (keeping the
version for the audits included); ``idle`` = the time from asking for a batch to training on it
(blocked in ``take_batch``, and the batch's audits); utilization = busy / (busy + idle). Evaluation
time is excluded from both, and so is the wait for the first batch (``startup_s``). ``echo2 train``
starts the clock only once every local worker has registered (``coordinator.start_timeout_s``).

**Crash and resume.** Every checkpoint (``checkpoint.py``; ``checkpoint.every`` steps and at the end;
written to ``checkpoints/step_NNNNNN.partial/`` and renamed, so a folder named ``step_NNNNNN`` is
complete) holds, besides the HF model folder and the optimizer + scheduler state, a ``resume.pt``: the
coordinator's books as plain data (``coordinator/snapshot.py``: data cursor, replay buffer with its
completions and version tags, re-queued prompts, the prompts of leases in flight — re-queued on restore,
as if expired —, pacing and reliability counters, the run clock's times), the loop's accounting (steps,
busy/idle time, evals), the versions kept for audits, and the torch, Python and verifier RNG states.
``echo2 train --resume RUN_DIR`` loads the newest one, republishes its version and listens on the
address and run token kept in ``coordinator.json`` (owner-readable only). Metrics recorded after the
checkpoint are dropped: the resumed run redoes those steps. Workers register again (how they keep what
they hold: :mod:`echo2.rollout`); local workers die with the learner and the resumed run starts its own
(:mod:`echo2.launch`).
"""
