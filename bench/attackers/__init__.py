"""The attacker processes of ``bench/attacks.py``: each joins a run with the run token and misbehaves."""
