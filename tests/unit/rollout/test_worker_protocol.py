"""The worker's protocol core (:mod:`echo2.core.worker_protocol`), driven without threads or
sockets; and a wrong rule in it changes the live worker and the simulated one alike."""



from echo2.core.worker_protocol import WorkerProtocol


def test_sequential_pull_fetches_before_every_request_and_never_in_the_background():
    protocol = WorkerProtocol("sync")
    assert protocol.before_lease() == "fetch_newest"
    assert not protocol.heard(5) and not protocol.fetch_ended(5)  # nothing runs in the background
    protocol.loaded(5)
    assert protocol.version == 5 and protocol.before_lease() == "fetch_newest"
    assert protocol.answered("refresh", 6, 0.1) == "ask_again"  # the next request fetches first


def test_push_pull_fetches_the_newest_heard_in_the_background_and_swaps_it_in_between_leases():
    protocol = WorkerProtocol("async")
    protocol.loaded(0)
    assert protocol.before_lease() == "lease"
    assert protocol.heard(2)  # start a fetch
    protocol.fetch_started()
    assert not protocol.heard(3)  # one fetch at a time
    assert protocol.fetch_ended(2)  # v3 was heard meanwhile: fetch again at once
    assert protocol.staged == 2 and protocol.version == 0 and protocol.before_lease() == "swap_in"
    assert protocol.swap_in() == 2 and protocol.version == 2 and protocol.staged is None
    assert protocol.swap_in() is None  # nothing staged


def test_a_refresh_answer_waits_for_the_staged_version_and_stop_ends_the_run():
    protocol = WorkerProtocol("async")
    protocol.loaded(1)
    assert protocol.answered("refresh", 4, 0.1) == "wait_for_staged"
    assert protocol.known == 4 and protocol.wants_fetch()
    assert protocol.answered("wait", 4, 0.1) == "ask_again" and protocol.answered("parked", 4, 0.1) == "ask_again"
    assert protocol.answered("stop", 4, 0.1) == "stop"


def test_the_next_lease_is_asked_ahead_only_when_it_pays_and_will_use_the_weights_held():
    protocol = WorkerProtocol("async")
    protocol.loaded(1)
    assert protocol.answered("granted", 1, 0.18) == "generate"
    assert not protocol.ask_ahead()  # no lease generated yet: its length unknown
    protocol.generated(0.10)
    assert protocol.ask_ahead() and protocol.asking_ahead
    assert not protocol.ask_ahead()  # one request ahead at a time
    protocol.answered("granted", 1, 0.18)
    protocol.fetch_ended(2)  # a fetched version waits to be swapped in
    assert not protocol.ask_ahead()
    protocol.swap_in()
    assert protocol.ask_ahead()
    protocol.answered("granted", 2, 0.18)
    assert not protocol.ask_ahead(leaving=True)
    assert not WorkerProtocol("async", swaps_mid_lease=True, round_trip_s=1, generate_s=0.1).ask_ahead()
    assert not WorkerProtocol("pull", round_trip_s=1, generate_s=0.1).ask_ahead()


def test_no_background_fetch_runs_beside_the_blocking_first_one():
    """A worker's first weights (and its first after registering anew) come by a blocking fetch; a
    background fetch of the same version beside it had doubled the bytes on the learner's link."""
    protocol = WorkerProtocol("async")
    assert not protocol.heard(3) and not protocol.wants_fetch()
    protocol.loaded(3)
    assert not protocol.wants_fetch()  # it holds the newest
    assert protocol.heard(4)
    protocol.forget()
    assert not protocol.heard(5)  # registered anew: the blocking fetch again


def test_a_forgotten_worker_holds_nothing():
    protocol = WorkerProtocol("async", asking_ahead=True, fetching=True)
    protocol.loaded(7)
    protocol.fetch_ended(8)
    protocol.forget()
    assert (protocol.version, protocol.staged, protocol.fetched, protocol.known) == (-1, None, -1, 0)
    assert not protocol.fetching and not protocol.asking_ahead
