"""The heap settling around a process's long phase (:mod:`echo2.model.heap`)."""

import gc

from echo2.model import heap


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_setup_objects_are_set_aside_during_the_phase_and_handed_back_after():
    kept = [Cycle() for _ in range(100)]
    with heap.settled():
        assert gc.get_freeze_count() >= len(kept)  # a full collection walks none of them
        during = Cycle()
        del during
        assert gc.collect() >= 1  # what the phase allocates is collected as before
    assert gc.get_freeze_count() == 0  # a later run can free this run's objects


def test_a_failing_phase_still_hands_its_objects_back():
    try:
        with heap.settled():
            raise RuntimeError("the run failed")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0
