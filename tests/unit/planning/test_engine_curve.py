"""Response lengths as a distribution and an engine's throughput as its batch drains (pure logic)."""

import random
import statistics

import pytest

from echo2.planning.engine_curve import DecodeCurve
from echo2.planning.lengths import LengthSampler, ResponseLengths
from echo2.simulation.centralized import step_generation_s


def test_a_flat_curve_times_tokens_at_the_full_rate_whatever_the_lengths():
    curve = DecodeCurve.flat(100.0, max_sequences=4)
    assert curve.drain_s([10.0, 30.0, 60.0]) == pytest.approx(1.0)
    assert curve.tokens_per_s(1) == curve.tokens_per_s(64) == pytest.approx(100.0)


def test_the_curve_passes_through_its_two_points_and_falls_as_the_batch_drains():
    curve = DecodeCurve.through(single_tokens_per_s=50.0, full_tokens_per_s=1000.0, full_sequences=64)
    assert curve.tokens_per_s(1) == pytest.approx(50.0)
    assert curve.tokens_per_s(64) == pytest.approx(1000.0)
    assert curve.tokens_per_s(500) == pytest.approx(1000.0)  # cut at the batch it holds
    # 63 responses of 10 tokens and one of 1000: after the first 10 steps the last one decodes alone
    lengths = [10.0] * 63 + [1000.0]
    expected = 10 * curve.step_s(64) + 990 * curve.step_s(1)
    assert curve.drain_s(lengths) == pytest.approx(expected)
    assert curve.drain_s(lengths) > 990 / 50.0


def test_continuous_batching_refills_a_freed_slot_and_static_batching_waits_for_the_longest_row():
    continuous = DecodeCurve.through(10.0, 15.0, 2)
    static = DecodeCurve.through(10.0, 15.0, 2, continuous=False)
    # two slots; lengths 1, 3, 2: continuous starts the third when the first ends
    assert continuous.drain_s([1.0, 3.0, 2.0]) == pytest.approx(3 * continuous.step_s(2))
    assert static.drain_s([1.0, 3.0, 2.0]) == pytest.approx(3 * static.step_s(2) + 2 * static.step_s(1))


def test_an_impossible_curve_is_refused_with_its_figures():
    with pytest.raises(ValueError, match="a batch must be faster"):
        DecodeCurve.through(single_tokens_per_s=100.0, full_tokens_per_s=1000.0, full_sequences=8)


def test_a_parametric_distribution_keeps_its_mean_and_puts_a_share_at_the_cap():
    sampler = LengthSampler(ResponseLengths(max_tokens=4096, across_cv=1.2, within_cv=0.3), mean=1500.0)
    rng = random.Random(0)
    groups = [sampler.group(rng, 8) for _ in range(4000)]
    flat = [x for group in groups for x in group]
    assert statistics.fmean(flat) == pytest.approx(1500.0, rel=0.02)
    assert max(flat) == 4096
    assert sum(x == 4096 for x in flat) / len(flat) == pytest.approx(sampler.capped_share, abs=0.01)
    assert 0.03 < sampler.capped_share < 0.3
    # lengths correlate within a group: the spread inside one is well below the spread of all
    inside = statistics.fmean(statistics.pstdev(group) for group in groups)
    assert inside < 0.6 * statistics.pstdev(flat)


def test_measured_groups_are_drawn_whole_and_resampled_to_another_group_size():
    measured = ResponseLengths(groups=[[10.0, 12.0, 11.0, 13.0], [300.0, 280.0, 310.0, 290.0]])
    sampler = LengthSampler(measured, mean=measured.measured_mean)
    rng = random.Random(1)
    for _ in range(20):
        assert sampler.group(rng, 4) in measured.groups
        resized = sampler.group(rng, 6)
        assert len(resized) == 6 and (max(resized) < 20 or min(resized) > 200)


def test_no_distribution_is_every_response_at_the_mean_without_a_draw():
    rng = random.Random(2)
    state = rng.getstate()
    assert LengthSampler(None, 700.0).group(rng, 3) == [700.0] * 3
    assert rng.getstate() == state


@pytest.mark.parametrize("lengths, message", [
    ({"across_cv": 0.5}, "needs max_tokens"),
    ({"groups": [[1.0]], "within_cv": 0.2, "max_tokens": 9}, "not both"),
    ({"groups": [[20.0]], "max_tokens": 9}, "exceeds max_tokens"),
])
def test_a_malformed_distribution_says_what_is_wrong(lengths, message):
    with pytest.raises(ValueError, match=message):
        ResponseLengths(**lengths)


def test_a_synchronous_step_waits_for_its_slowest_engine():
    curve = DecodeCurve.through(10.0, 40.0, 8)
    even = [[100.0] * 8, [100.0] * 8]
    one_long = [[100.0] * 8, [100.0] * 7 + [900.0]]
    assert step_generation_s(curve, one_long, engines=2) == pytest.approx(curve.drain_s(one_long[1]))
    assert step_generation_s(curve, one_long, engines=2) > 800 / 10.0 > step_generation_s(curve, even, engines=2)
