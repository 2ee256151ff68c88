"""Time the shipped engine's decoding steps at several batch sizes: the decode curve of
:mod:`echo2.planning.engine_curve` as this machine runs it (``echo2 calibrate``).

Each batch of ``n`` rows decodes a fixed number of tokens twice, ``short`` and ``long`` (no row
stops: the end-of-sequence id is one the model never emits), through the same sampler the workers
use (:func:`echo2.model.sampling.sample`, static batches); the difference over ``long - short``
steps is one decoding step without the prefill. The best of ``repeats`` is kept: the figure is
the engine's, not the noise of whatever else shares the core.
"""

from __future__ import annotations

import time

from echo2.model.draws import Draws
from echo2.model.loading import load_model, pin_threads
from echo2.model.sampling import sample

#: Batch sizes timed (rows decoding together).
SIZES = (1, 2, 4, 8, 16, 32)


def decode_steps(model_name: str, dtype: str, threads: int, sizes: tuple[int, ...] = SIZES, prompt_tokens: int = 32,
                 short: int = 8, long: int = 40, repeats: int = 3) -> list[tuple[int, float]]:
    """``(rows, seconds per decoding step)`` for each of ``sizes``, on ``threads`` CPU threads."""
    pin_threads(threads)
    model = load_model(model_name, dtype)
    vocab = model.config.vocab_size
    prompt = [[(17 * k) % (vocab - 1) + 1 for k in range(prompt_tokens)]]

    def seconds(rows: int, tokens: int) -> float:
        best = float("inf")
        for repeat in range(repeats):
            started = time.perf_counter()
            sample(model, prompt * rows, max_new_tokens=tokens, eos_id=-1, pad_id=0, temperature=1.0,
                   draws=Draws.seeded(repeat, rows))
            best = min(best, time.perf_counter() - started)
        return best

    return [(rows, (seconds(rows, long) - seconds(rows, short)) / (long - short)) for rows in sizes]
