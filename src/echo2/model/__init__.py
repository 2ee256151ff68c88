"""The model, as the learner and the workers both hold it: loading it from any source
(``loading.py``, ``sources.py``), LoRA adapters (``lora.py``), the token layout both sides score
and sample with (``tokens.py``), sampling with behaviour log-probs (``sampling.py`` over
``decoding.py``), multi-turn episodes (``episodes.py``) and held-out evaluation
(``evaluation.py``). Import the module you need: this package itself loads nothing (torch stays
out of the coordinator's imports)."""
