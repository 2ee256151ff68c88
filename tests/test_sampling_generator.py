"""Where a worker draws its samples, and from which seed.

The hf engine's generator lives on its model's device (a CPU generator made a GPU worker copy
every token's distribution to the host: 5.3x slower sampling on an H200), and a worker's seed is
the same in every process (``hash()`` of a string is not, under PYTHONHASHSEED).
"""

import os
import subprocess
import sys

import pytest

from echo2.model.sources import SHIPPED_MODEL
from echo2.protocol import RunSpec
from echo2.rollout.engines.hf import HfEngine
from echo2.rollout.worker import sampling_seed


@pytest.mark.integration
def test_worker_seed_is_the_same_in_every_process():
    code = "from echo2.rollout.worker import sampling_seed; print(sampling_seed(3, 'worker-7'))"
    seeds = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONHASHSEED": str(hash_seed)}).stdout.strip()
             for hash_seed in (1, 2, 3)}
    assert seeds == {str(sampling_seed(3, "worker-7"))}
    assert sampling_seed(3, "worker-7") != sampling_seed(3, "worker-8")
    assert sampling_seed(3, "worker-7") // 1000 == 3


def test_hf_engine_draws_on_its_models_device_and_repeats_a_seed():
    spec = RunSpec(model=SHIPPED_MODEL, dtype="float32", group_size=2,
                   temperature=1.0, max_new_tokens=6, groups_per_lease=1, protocol="async", staleness=1,
                   fetch_delay_s=0.0, broadcast_stall_s=5.0, broadcast_timeout_s=30.0, heartbeat_interval_s=1.0,
                   seed=0)
    engine = HfEngine(spec, eos_id=1, pad_id=0)
    device = next(engine.sampling_model.parameters()).device
    assert engine.generator(5).device == device
    prompts = [[2, 3, 4]] * 4
    first, again = engine.generate(prompts, engine.generator(5)), engine.generate(prompts, engine.generator(5))
    assert first.completion_ids == again.completion_ids and first.logprobs == again.logprobs
    other = engine.generate(prompts, engine.generator(6))
    assert other.completion_ids != first.completion_ids or other.logprobs != first.logprobs
