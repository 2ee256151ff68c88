"""What a run tells its user while it runs.

* ``metrics.py`` — JSONL and TensorBoard metrics, and the timeline's intervals;
* ``trackers.py`` — the same scalars to Weights & Biases and trackio (optional);
* ``progress.py`` — the live progress line and the sample completions at each evaluation.
"""
