"""Leases sized to the device (``rollout.groups_per_lease: device``): a worker asks for as many
groups as its free memory holds the decoding of, up to the staleness window."""

import threading

import pytest

from echo2.config import ConfigError, load_config
from echo2.core.lease_sizing import LOGIT_COPIES, USABLE_SHARE, DecodeFootprint, groups_that_fit
from echo2.launch.train import run_spec
from echo2.protocol import LeasedPrompt, LeaseResponse
from echo2.rollout.lease_generation import LeaseGenerator

FOOTPRINT = DecodeFootprint(kv_bytes_per_token=1000, vocab_size=250)  # a row of 100 tokens: 100 kB + 4 kB


def test_groups_fit_the_usable_share_of_free_memory_between_one_and_the_most_asked():
    row = 100 * 1000 + LOGIT_COPIES * 4 * 250
    assert FOOTPRINT.row_bytes(100) == row
    free = int(40 * row / USABLE_SHARE) + 1  # room for exactly 40 rows: 5 groups of 8
    assert groups_that_fit(free, FOOTPRINT, group_size=8, context_tokens=100, most=64) == 5
    assert groups_that_fit(free, FOOTPRINT, group_size=8, context_tokens=100, most=3) == 3  # the window's cap
    assert groups_that_fit(free, FOOTPRINT, group_size=8, context_tokens=1000, most=64) == 1  # not even one: still one
    assert groups_that_fit(2 * free, FOOTPRINT, group_size=8, context_tokens=100, most=64) == 10


def test_device_sized_leases_are_capped_by_the_staleness_window():
    config = load_config(overrides=["rollout.groups_per_lease=device", "learner.groups_per_step=8", "staleness=2"])
    assert config.lease_groups == 24
    spec = run_spec(config)
    assert spec.size_leases_to_device and spec.groups_per_lease == 24
    fixed = load_config(overrides=["rollout.groups_per_lease=4"])
    assert fixed.lease_groups == 4 and not run_spec(fixed).size_leases_to_device
    with pytest.raises(ConfigError, match="groups_per_lease"):
        load_config(overrides=["rollout.groups_per_lease=gpu"])


class Engine:
    """Holds ``rows`` rows of any length; generates empty completions."""

    def __init__(self, rows: int) -> None:
        self.rows, self.asked = rows, []
        self.max_context = None

    def groups_that_fit(self, context_tokens: int, most: int) -> int:
        self.asked.append(context_tokens)
        return min(most, self.rows // 4)

    def sample(self, sampler, prompt_ids, params, draws, finished=None, updates=None):
        from echo2.model.sampling import Samples
        return Samples([[1] for _ in prompt_ids], [[-0.1] for _ in prompt_ids])


class Tokenizer:
    """One token per character."""

    eos_token_id = 1

    def __call__(self, text):
        return {"input_ids": [5] * len(text)}

    def decode(self, ids, skip_special_tokens=True):  # noqa: ARG002
        return "x" * len(ids)


def test_the_first_lease_asks_one_group_and_its_prompts_size_the_next():
    config = load_config(overrides=["rollout.groups_per_lease=device", "learner.groups_per_step=8",
                                    "rollout.group_size=4", "rollout.max_new_tokens=10"])
    engine = Engine(rows=40)
    generator = LeaseGenerator(run_spec(config), engine, Tokenizer(), client=None, stop=threading.Event())
    assert generator.lease_groups() == 1 and engine.asked == []  # no prompt seen yet
    lease = LeaseResponse(status="granted", latest_version=0, lease_id="l", version=0,
                          prompts=[LeasedPrompt(slot=0, prompt="x" * 30)], draw_seed=1)
    generator.generate(lease, lambda: 0, None)
    assert generator.lease_groups() == 10 and engine.asked == [30 + 10]  # prompt + completion tokens
    fixed = LeaseGenerator(run_spec(load_config(overrides=["rollout.groups_per_lease=3"])), engine, None,
                           client=None, stop=threading.Event())
    assert fixed.lease_groups() == 3
