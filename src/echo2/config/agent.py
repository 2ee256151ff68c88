"""The ``agent`` section: a run whose episodes are played by an agent of the user's harness
(``task.name=agent:module:function``, :mod:`echo2.gateway`).

The agent function runs on the trusted host (the learner's), ``concurrency`` episodes at a time;
its model calls go through the coordinator's OpenAI-compatible gateway to the fleet. The
examples it plays are those of the task ``examples`` names, built with ``task.options``.
"""

from __future__ import annotations

from pydantic import Field

from echo2.config.base import Section


class AgentConfig(Section):
    examples: str = "arithmetic"
    """The task whose examples the agent plays (a built-in name or ``module:Class``, built with
    ``task.options``); the agent scores its own episodes."""
    concurrency: int = Field(8, ge=1)
    """Episodes the run's agent pool plays at once (each its own ``openai`` client)."""
    episode_timeout_s: float = Field(120.0, gt=0)
    """An episode not rewarded within this of its opening is dropped, its group with it (counted);
    the pool's agent function is cancelled at this timeout. Its group holds a slot of the staleness
    window until then: a holder of the run token that claimed episodes and never rewarded them
    stalled the learner this long (300 s before), so keep it near the longest honest episode."""
    max_claimed: int | None = Field(None, ge=1)
    """Training episodes claimed and not yet rewarded, at most, over every claimant (None: twice
    ``concurrency``): past it ``POST /rl/episodes`` answers 204 until one ends."""
    call_timeout_s: float = Field(120.0, gt=0)
    """A model call no worker answered within this fails (504) with that reason."""
    max_calls_per_episode: int = Field(4, ge=1)
    """Model calls of one episode in flight at once, at most (past it: 429 with ``Retry-After``)."""
    max_calls_per_episode_total: int = Field(128, ge=1)
    """Model calls one episode may make in all (past it: 400): a holder of an episode's key calling
    on and on had taken the fleet's time from every honest episode."""
    max_calls_in_flight: int = Field(256, ge=1)
    """Model calls in flight over the whole run, at most (past it: 429). Calls are awaited on the
    coordinator's event loop, never on the threads its workers' routes run on."""
    chat_template: str | None = None
    """The model whose chat template renders the calls (None: ``model.name``'s own)."""
    success_reward: float = 1.0
    """Held-out evaluation: an episode rewarded at least this counts as solved."""
