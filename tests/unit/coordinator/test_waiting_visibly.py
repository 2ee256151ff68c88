"""A learner cut off from its workers waits visibly: the coordinator says why it is not training
(buffered groups, live and silent workers), the progress line logs it, the dashboard shows it,
and the coordinator logs each worker it declares dead."""

from __future__ import annotations

import logging
import time

import pytest
from state_support import make_state, submit_all

from echo2.coordinator.batches import WAIT_WORTH_SAYING_S
from echo2.coordinator.dashboard import collect
from echo2.telemetry.progress import WAIT_LOG_EVERY_S, Progress


def test_the_coordinator_says_why_the_learner_waits(caplog):
    state = make_state(staleness=1, heartbeat_timeout_s=5)
    assert state.data_wait() is None  # nobody is waiting yet
    worker = state.members.register("gpu-1")
    with pytest.raises(TimeoutError):
        state.take_batch(0, timeout_s=0.05)
    assert state.data_wait() is None  # a short wait between steps is not news
    state.learner.waiting_since = (0, time.monotonic() - WAIT_WORTH_SAYING_S)  # as if it had waited that long
    why = state.data_wait()
    assert "for step 0's data: 0 groups buffered (a step takes 2), 1 live workers" in why
    worker.last_seen = time.monotonic() - 60  # silent for a minute: the next pass declares it dead
    with caplog.at_level(logging.WARNING, logger="echo2"), pytest.raises(TimeoutError):
        state.take_batch(0, timeout_s=0.6)
    assert "worker gpu-1 silent for 5s: declared dead" in caplog.text
    assert state.data_wait().endswith("0 live workers, 1 declared dead (silent)")
    assert collect(state, None).learner_waiting == state.data_wait()


def test_the_wait_ends_with_the_batch():
    state = make_state(staleness=1)
    worker = state.members.register("gpu-1")
    with pytest.raises(TimeoutError):
        state.take_batch(0, timeout_s=0.05)
    submit_all(state, worker, state.work.lease(worker, 0, max_groups=2, wait_s=0))
    assert len(state.take_batch(0, timeout_s=1)) == 2
    assert state.data_wait() is None and collect(state, None).learner_waiting is None


def test_a_long_wait_is_logged_without_a_terminal(caplog):
    progress = Progress(total_steps=10)
    progress.tty = False
    with caplog.at_level(logging.INFO, logger="echo2"):
        progress.waiting("waiting 3s for step 4's data", waited_s=3.0)
        assert caplog.text == ""  # a short wait is the normal rhythm of a generation-bound run
        progress.waiting("waiting 20s for step 4's data", waited_s=WAIT_LOG_EVERY_S + 5)
        progress.waiting("waiting 21s for step 4's data", waited_s=WAIT_LOG_EVERY_S + 6)
    assert caplog.text.count("waiting") == 1  # then once every WAIT_LOG_EVERY_S
