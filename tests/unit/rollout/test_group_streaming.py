"""A lease answered group by group: each group goes out the moment its rows are all done, while the
lease's other rows still decode; the final submission carries the rest, never empty, and every slot
is answered exactly once."""

import threading

from test_lease_sizing import Tokenizer

from echo2.config import load_config
from echo2.launch.train import run_spec
from echo2.model.sampling import Samples
from echo2.protocol import LeasedPrompt, LeaseResponse, RespondResponse
from echo2.rollout.lease_generation import LeaseGenerator


class EndingEngine:
    """Row ``i``'s completion is ``[i, 1]``; rows end in ``order`` (None: the engine tells nothing)."""

    max_context = None

    def __init__(self, order: list[int] | None) -> None:
        self.order = order

    def sample(self, sampler, prompt_ids, params, draws, finished=None, updates=None):
        tokens = [[row, 1] for row in range(len(prompt_ids))]
        if finished is not None and self.order is not None:
            for row in self.order:
                finished(row, tokens[row], [-0.5, -0.1], None)
        return Samples(tokens, [[-0.5, -0.1] for _ in prompt_ids])


def lease(groups: int) -> LeaseResponse:
    return LeaseResponse(status="granted", latest_version=3, lease_id="l7", version=3, draw_seed=5,
                         prompts=[LeasedPrompt(slot=10 + g, prompt="x") for g in range(groups)])


def generate(order, overrides=()):
    spec = run_spec(load_config(overrides=["rollout.group_size=2", *overrides]))
    posted = []
    generator = LeaseGenerator(spec, EndingEngine(order), Tokenizer(), client=None, stop=threading.Event())
    final, seconds = generator.generate(lease(3), lambda: 3, None, post=posted.append)
    return posted, final, seconds


def test_groups_go_out_in_the_order_their_rows_end_and_the_last_with_the_final_submission():
    # rows 2-3 (slot 11) end first, then rows 0-1 (slot 10), then rows 4-5 (slot 12)
    posted, final, seconds = generate([3, 2, 0, 4, 1, 5])
    assert [[g.slot for g in part.groups] for part in posted] == [[11], [10]]
    assert [g.slot for g in final.groups] == [12]
    assert [c.token_ids for c in posted[0].groups[0].completions] == [[2, 1], [3, 1]]  # in the group's own order
    assert all(part.lease_id == "l7" and part.version == 3 for part in [*posted, final])
    assert sum(part.generate_seconds for part in [*posted, final]) <= seconds + 1e-6


def test_an_engine_that_tells_nothing_answers_the_lease_whole():
    posted, final, _ = generate(None)
    assert posted == [] and [g.slot for g in final.groups] == [10, 11, 12]


def test_rows_all_ending_at_once_leave_the_last_group_to_the_final_submission():
    posted, final, _ = generate([0, 1, 2, 3, 4, 5])
    assert [g.slot for part in posted for g in part.groups] == [10, 11] and [g.slot for g in final.groups] == [12]


def test_an_episode_of_several_turns_is_not_streamed():
    """Its groups end with their last turn, which the lease's final submission carries."""
    spec = run_spec(load_config(overrides=["rollout.group_size=2"])).model_copy(update={"max_turns": 2})

    class Environment:  # ends every episode after its first turn
        def respond(self, request):
            return RespondResponse(observations=[None] * len(request.items))

    posted = []
    generator = LeaseGenerator(spec, EndingEngine([0, 1, 2, 3, 4, 5]), Tokenizer(), client=Environment(),
                               stop=threading.Event())
    final, _ = generator.generate(lease(3), lambda: 3, None, post=posted.append)
    assert posted == [] and [g.slot for g in final.groups] == [10, 11, 12]
