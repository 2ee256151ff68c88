"""The run clock (``core/run_clock.py``): the learner's step time and a version's dissemination
time as activation reads them, kept by the coordinator and by the simulator alike."""



from echo2.core.run_clock import RunClock


def test_a_step_is_timed_from_taking_the_batch_to_publishing_and_replans_every_n_versions():
    clock = RunClock(replan_every=2)
    assert not clock.published(0, now=5.0) and clock.train_s is None  # the first version: no step made it
    clock.batch_taken(10.0)
    assert not clock.published(1, now=12.0) and clock.train_s == 2.0
    clock.batch_taken(20.0)
    assert clock.published(2, now=24.0)  # every second version
    assert 2.0 < clock.train_s < 4.0  # smoothed
    assert not clock.published(3, now=30.0) and 2.0 < clock.train_s < 4.0  # no batch taken since: nothing timed


def test_dissemination_samples_the_slowest_version_of_each_report():
    clock = RunClock(replan_every=1)
    clock.disseminated([])
    assert clock.broadcast_s is None
    clock.disseminated([1.0, 3.0])
    assert clock.broadcast_s == 3.0
    fresh = RunClock(replan_every=1)
    fresh.restore(clock.state())
    assert (fresh.train_s, fresh.broadcast_s) == (None, 3.0)
