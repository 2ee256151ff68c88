"""The model, as the learner and the workers both hold it: loading it from any source
(``loading.py``, ``sources.py``), LoRA adapters (``lora.py``), the token layout both sides score
and sample with (``tokens.py``), sampling with behaviour log-probs (``sampling.py`` over
``decoding.py``), multi-turn episodes (``episodes.py``) and held-out evaluation
(``evaluation.py``). Import the module you need: this package itself loads nothing (torch stays
out of the coordinator's imports).

* ``draws.py`` — verifiable sampling on a model's logits: each token the inverse CDF of
  ``softmax(logits / T)`` at its draw, and how far a token falls outside its interval;
* ``decode_probe.py`` — the shipped engine's decoding steps timed at 1 to 32 rows
  (``echo2 calibrate``'s decode curve);
* ``heap.py`` — what a process holding a model built at setup, set aside from garbage
  collection around its long phase (a full collection had paused the learner's process ~1 s).
"""
