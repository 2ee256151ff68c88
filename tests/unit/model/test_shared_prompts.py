"""Each distinct prompt is computed once (a group's rows share it), in sampling and in scoring,
and that changes nothing but the cost: log-probs, entropies and gradients equal those of the
plain layout in which every row runs its whole prompt + completion through the model."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from echo2.learner.logprobs import completion_scores
from echo2.model.draws import Draws
from echo2.model.sampling import sample
from echo2.model.tokens import distinct_prompts

PAD, EOS = 0, 1


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=PAD, eos_token_id=EOS)
    return LlamaForCausalLM(config).eval()


def full_sequence_logprobs(model, prompts, completions) -> torch.Tensor:
    """The plain reference: each row alone, prompt + completion in one forward, full logits."""
    rows = []
    for prompt, completion in zip(prompts, completions):
        ids = torch.tensor([prompt + completion])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
        rows.append(logp[len(prompt) - 1 :].gather(-1, ids[0, len(prompt) :, None]).squeeze(-1))
    return rows


def test_distinct_prompts_map_rows_to_their_prompt():
    distinct, owners = distinct_prompts([[5, 6], [5, 6], [7], [5, 6], [7, 8]])
    assert distinct == [[5, 6], [7], [7, 8]]
    assert owners == [0, 0, 1, 0, 2]


def test_shared_prompt_scores_and_gradients_equal_the_plain_layout():
    model = tiny_llama()
    prompts = [[3, 4, 5, 6, 7]] * 3 + [[8, 9]] * 2 + [[10, 11, 12]]
    completions = [[20, 21, 22], [23], [24, 25, 26, 27], [28, 29], [30, 31, 32], [33, EOS]]
    scores = completion_scores(model, prompts, completions, pad_id=PAD, entropies=True)
    reference = full_sequence_logprobs(model, prompts, completions)
    for row, expected in enumerate(reference):
        n = len(completions[row])
        assert torch.allclose(scores.logprobs[row, :n], expected, atol=1e-5)
        assert scores.mask[row, :n].all() and not scores.mask[row, n:].any()
        assert (scores.logprobs[row, n:] == 0).all()
    assert scores.entropies is not None and (scores.entropies[scores.mask.bool()] > 0).all()

    scores.logprobs.sum().backward()
    shared = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    torch.cat(full_sequence_logprobs(model, prompts, completions)).sum().backward()
    for name, parameter in model.named_parameters():
        assert torch.allclose(shared[name], parameter.grad, atol=1e-4), name


def test_sampler_behaviour_logprobs_match_the_learner_with_groups():
    model = tiny_llama()
    prompts = [[3, 4, 5, 6, 7]] * 4 + [[8, 9]] * 4
    samples = sample(model, prompts, max_new_tokens=6, eos_id=EOS, pad_id=PAD,
                     draws=Draws.seeded(1, len(prompts)))
    assert len(samples.completion_ids) == 8
    assert len({tuple(c) for c in samples.completion_ids[:4]}) > 1  # rows of a group sample on their own
    scores = completion_scores(model, prompts, samples.completion_ids, pad_id=PAD)
    for row, behaviour in enumerate(samples.logprobs):
        assert torch.allclose(scores.logprobs[row, : len(behaviour)], torch.tensor(behaviour), atol=1e-5)
