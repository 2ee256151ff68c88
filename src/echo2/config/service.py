"""The ``service`` section: ``echo2 serve``, echo2 as a Tinker-compatible training service (docs/tinker.md).

The rest of a run's config applies as for ``echo2 train``: ``model`` is the base model clients
train adapters of, ``workers`` the local fleet that samples for them (remote workers join with
``echo2 worker`` as to any run), ``coordinator`` (its host and port serve the API too; port 0: a
free one, then the same one on restarts), ``broadcast``, ``verification`` and ``limits`` as they are; ``task``, ``learner`` steps and ``eval`` are the clients' own business.
"""

from __future__ import annotations

from pydantic import Field

from echo2.config.base import Section


class ServiceConfig(Section):
    dir: str = "service"
    """Where the service keeps its state: the API key and the workers' run token (owner-only), the
    clients' saves (``checkpoints/``: ``tinker://`` paths), its log. A service started again on the
    same folder keeps its key, its address and every save, so its clients resume."""
    lora_alpha: float = Field(32.0, gt=0)
    """LoRA alpha of every training client's adapter (the Tinker API sets only the rank)."""
    max_lora_rank: int = Field(64, ge=1)
    """The largest LoRA rank a training client may ask for."""
    max_tokens: int = Field(512, ge=1)
    """The most tokens one sampled completion may ask for (``SamplingParams.max_tokens``; also the
    default when a request gives none)."""
    max_learning_rate: float = Field(1.0, gt=0)
    """The highest ``learning_rate`` an ``optim_step`` may carry (LoRA is trained at 1e-5 to 1e-3;
    an unbounded one made every adapter weight overflow, and the NaN adapter, published for
    sampling, made every worker that sampled it fail)."""
    max_sessions_per_key: int = Field(16, ge=1)
    """Live sessions one API key (tenant) may hold at once (``echo2 serve keys``)."""
    max_clients_per_key: int = Field(8, ge=1)
    """Training clients one API key may hold at once."""
    max_clients: int = Field(64, ge=1)
    """Training clients the service holds at once, over every key."""
    memory_budget_gb: float | None = Field(None, gt=0)
    """The service's resident memory past which no training client is created (each holds its
    adapter, gradients, AdamW moments and samplers); None: 80% of the machine's memory."""
    max_samples: int = Field(64, ge=1)
    """The most completions one sampling request may ask for (``num_samples``)."""
    session_timeout_s: float = Field(300.0, gt=0)
    """A client session silent this long (the SDK heartbeats every 10 s) is ended and what it held released."""
    turn_timeout_s: float = Field(300.0, gt=0)
    """A training client's request that waits this long for a lower ``seq_id`` fails."""
    sample_timeout_s: float = Field(600.0, gt=0)
    """A sampling request no worker answered within this fails with that reason."""
    sampler_idle_s: float = Field(30.0, gt=0)
    """A sampler (saved weights for sampling) neither a training client's newest nor used this long
    leaves the fleet's next version. Every version carries every sampler kept (~45 MB each for
    SmolLM2 at rank 32), and a synchronous client never samples from a superseded one again: at
    120 s the cookbook's arithmetic loop kept six or seven a version (300 MB, 5.7 s a step to
    publish). An asynchronous client keeps using its older samplers while it is off-policy, so
    they stay while in use."""
    poll_s: float = Field(30.0, gt=0, le=40)
    """How long one ``retrieve_future`` poll is held open (the SDK waits 45 s for it)."""
