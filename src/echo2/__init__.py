"""echo2: RL post-training of language models with a central learner and remote rollout workers."""

__version__ = "0.1.0"
