"""A stop asked for from another thread ends the step in hand, never inside it; a stale one is forgotten."""

import threading

import pytest

from echo2.learner import interrupts


def test_a_requested_stop_is_held_until_the_step_ends():
    interrupts.clear()
    steps_done = []
    with pytest.raises(KeyboardInterrupt, match="held until the step ended"):
        with interrupts.deferred():
            asker = threading.Thread(target=interrupts.request)
            asker.start()
            asker.join()
            assert interrupts.requested()
            steps_done.append(1)  # the step goes on to its end
    assert steps_done == [1] and not interrupts.requested()


def test_a_stop_asked_before_a_run_is_cleared_by_it():
    interrupts.request()
    interrupts.clear()
    with interrupts.deferred():
        pass  # nothing raised: the stale request was not this run's
    assert not interrupts.requested()
