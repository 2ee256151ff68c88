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
"""
