"""The courier: parts of a lease go out without blocking the decoding; while one submission is on
the wire the next queue and go out together; a lease's final submission waits for the leases before."""

import threading

import pytest

from echo2.protocol import Completion, GroupResult, SubmitRequest, SubmitResponse
from echo2.rollout.client import CoordinatorUnreachable
from echo2.rollout.courier import Courier, coalesced


def request(lease: str, slots: list[int], seconds: float = 0.1) -> SubmitRequest:
    return SubmitRequest(lease_id=lease, version=0, generate_seconds=seconds, groups=[
        GroupResult(slot=slot, completions=[Completion(token_ids=[1], logprobs=[-0.1])]) for slot in slots])


class GatedClient:
    """Answers each submission once ``gate`` is set (cleared again after each)."""

    def __init__(self) -> None:
        self.sent: list[SubmitRequest] = []
        self.gate, self.arrived = threading.Event(), threading.Semaphore(0)

    def submit(self, submission: SubmitRequest) -> SubmitResponse:
        self.sent.append(submission)
        self.arrived.release()
        assert self.gate.wait(10)
        return SubmitResponse(accepted=len(submission.groups))


def test_queued_parts_of_a_lease_go_out_as_one_with_its_final_submission():
    merged = coalesced([(request("a", [1]), True), (request("a", [2]), True), (request("a", [3], 0.3), False),
                        (request("b", [7]), True)])
    assert [([g.slot for g in r.groups], part, n) for r, part, n in merged] == [([1, 2, 3], False, 3), ([7], True, 1)]
    assert merged[0][0].generate_seconds == pytest.approx(0.5)


def test_parts_wait_for_the_wire_together_and_the_next_lease_waits_for_them():
    client = GatedClient()
    courier = Courier(client, session_lost=lambda: None)
    courier.post(request("a", [1]))
    assert client.arrived.acquire(timeout=10)  # the first part is on the wire
    courier.post(request("a", [2]))
    courier.send(request("a", [3]))  # returns at once: only this lease's own parts are in flight
    sent_b = threading.Thread(target=courier.send, args=(request("b", [4]),))
    sent_b.start()
    sent_b.join(0.2)
    assert sent_b.is_alive()  # lease b's final submission waits for lease a's to be answered
    client.gate.set()
    sent_b.join(10)
    courier.close()
    assert [[g.slot for g in r.groups] for r in client.sent] == [[1], [2, 3], [4]]


def test_an_unreachable_coordinator_is_raised_at_the_next_lease():
    class Unreachable:
        def submit(self, submission):
            raise CoordinatorUnreachable("no route")

    courier = Courier(Unreachable(), session_lost=lambda: None)
    courier.send(request("a", [1]))
    with pytest.raises(CoordinatorUnreachable):
        courier.send(request("b", [2]))
    courier.close()
