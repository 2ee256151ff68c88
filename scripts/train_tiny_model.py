"""Train the tiny model echo2 ships, from scratch, by supervised learning on the default task.

    python scripts/train_tiny_model.py                 # rebuild src/echo2/assets/tiny-arith
    python scripts/train_tiny_model.py --settle-check  # 2 more minutes at a small LR: is it settled?

The model is a Qwen2-architecture decoder with a character-level tokenizer, trained to imitate
a teacher with two routes to an answer (see ``docs/rl-notes.md``):

* a **worked** solution, one operation at a time after a marker (``<think>45-52=-7``), always
  right — 70% of the demonstrations, then 30% during the last third of training, so that the finished
  model opens with the marker only ~30% of the time;
* a **terse** answer (``-7``), right only 30% of the time: otherwise the teacher makes the
  classic slip of applying the operators from the right (``a - b + c`` as ``a - (b + c)``).

The shipped model therefore answers tersely under greedy decoding (held-out accuracy ~35%)
although it can work the answer out (~91% when the marker is forced): a behaviour that RL with
the exact-match reward alone can discover, as reasoning RL does with LLMs. The learning rate
warms up, then follows a cosine down to ~0, so the shipped checkpoint is *settled*: more
supervised training at a small learning rate barely moves its held-out accuracy, and any gain
an RL run shows is the RL's, not the checkpoint settling. ``--settle-check`` measures exactly
that (with the final mix of demonstrations).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import time
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from echo2.model.evaluation import evaluate
from echo2.learner.logprobs import completion_logprobs
from echo2.learner.optimizer import OPTIMIZER_FILE
from echo2.model.loading import SHIPPED_MODEL_DIR, load_model, load_tokenizer, pin_threads
from echo2.tasks import ArithmeticTask, Example
from echo2.tasks.arithmetic import WORK_MARKER

CHARACTERS = "0123456789+-*="
SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]


def build_tokenizer(with_marker: bool) -> PreTrainedTokenizerFast:
    """Character-level tokenizer: a BPE model with no merges splits text into characters; the
    worked-solution marker is one more token when ``with_marker``."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + list(CHARACTERS))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    if with_marker:
        backend.add_tokens([AddedToken(WORK_MARKER, special=False, normalized=False)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def build_model(tokenizer: PreTrainedTokenizerFast, hidden: int, layers: int, heads: int) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return Qwen2ForCausalLM(config)


MAX_NEW_TOKENS = 24


def right_to_left(expression: str) -> int:
    """The classic slip of evaluating ``a - b + c`` as ``a - (b + c)``: operators applied from the right."""
    tokens = re.findall(r"\d+|[+*-]", expression.rstrip("="))
    value = int(tokens[-1])
    for at in range(len(tokens) - 3, -1, -2):
        value = int(eval(f"{tokens[at]}{tokens[at + 1]}{value}"))  # noqa: S307 (digits and +-* only)
    return value


def demonstrations(task: ArithmeticTask, seed: int, worked_fraction, terse_accuracy: float = 1.0):
    """Endless (prompt, completion) pairs: worked solutions with probability ``worked_fraction()``
    (a callable, read per example, so the mix can change during training). Worked solutions are
    always right; a terse answer is right with probability ``terse_accuracy`` and otherwise makes
    the right-to-left slip (:func:`right_to_left`) — a teacher careful only when it writes its work down."""
    rng = random.Random(seed)
    for example in task.train_examples(seed):
        if rng.random() < worked_fraction():
            yield example.prompt, task.worked_solution(example)
        elif rng.random() < terse_accuracy:
            yield example.prompt, example.answer
        else:
            yield example.prompt, str(right_to_left(example.prompt))


def supervised_loss(model, tokenizer, pairs) -> torch.Tensor:
    prompt_ids = [tokenizer(prompt)["input_ids"] for prompt, _ in pairs]
    answer_ids = [tokenizer(completion)["input_ids"] + [tokenizer.eos_token_id] for _, completion in pairs]
    logprobs, mask = completion_logprobs(model, prompt_ids, answer_ids, pad_id=tokenizer.pad_token_id)
    return -(logprobs * mask).sum() / mask.sum()


def held_out_accuracy(model, tokenizer, task, n: int) -> float:
    return evaluate(model, tokenizer, task, task.eval_examples(n), max_new_tokens=MAX_NEW_TOKENS).accuracy


def route_accuracies(model, tokenizer, task, n: int) -> dict[str, float]:
    """Greedy accuracy when each route is forced (the marker appended to the prompt, or not)."""
    examples = task.eval_examples(n)
    worked = [Example(e.prompt + WORK_MARKER, e.answer) for e in examples]
    return {"free": held_out_accuracy(model, tokenizer, task, n),
            "worked_forced": evaluate(model, tokenizer, task, worked, max_new_tokens=MAX_NEW_TOKENS).accuracy}


def train(model, tokenizer, task, *, steps: int, batch: int, lr: float, warmup: int, schedule: str, seed: int,
          worked_fraction: float, final_worked_fraction: float | None = None, final_steps: int = 0,
          log_every: int = 500, eval_size: int = 500, moments: dict | None = None,
          terse_accuracy: float = 1.0) -> torch.optim.AdamW:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    if moments is not None:  # continue with the saved moments, at this call's learning rate
        optimizer.load_state_dict({"state": moments, "param_groups": optimizer.state_dict()["param_groups"]})
    step = 0

    def mix() -> float:
        if final_worked_fraction is not None and step >= steps - final_steps:
            return final_worked_fraction
        return worked_fraction

    stream = demonstrations(task, seed, mix, terse_accuracy)

    def factor(step: int) -> float:
        if schedule == "constant":
            return 1.0
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    model.train()
    started = time.time()
    for step in range(steps):
        loss = supervised_loss(model, tokenizer, [next(stream) for _ in range(batch)])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if (step + 1) % log_every == 0 or step + 1 == steps:
            accuracy = held_out_accuracy(model, tokenizer, task, eval_size)
            print(f"step {step + 1}/{steps} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e} "
                  f"held-out greedy accuracy {accuracy:.1%} ({time.time() - started:.0f}s)", flush=True)
            model.train()
    model.eval()
    return optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SHIPPED_MODEL_DIR)
    parser.add_argument("--steps", type=int, default=3600)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=96)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--num-operands", type=int, default=3, help="operands per expression (task difficulty)")
    parser.add_argument("--worked-fraction", type=float, default=0.7,
                        help="share of demonstrations that work the answer out step by step")
    parser.add_argument("--final-worked-fraction", type=float, default=0.3,
                        help="that share during the last --final-steps (and in --settle-check)")
    parser.add_argument("--final-steps", type=int, default=1200)
    parser.add_argument("--terse-accuracy", type=float, default=0.3,
                        help="share of terse demonstrations that are right (the rest make the right-to-left slip)")
    parser.add_argument("--settle-check", action="store_true",
                        help="load --out, train --settle-minutes more at --settle-lr, report the accuracy change")
    parser.add_argument("--settle-minutes", type=float, default=2.0)
    parser.add_argument("--settle-lr", type=float, default=3e-5)
    parser.add_argument("--settle-steps", type=int, default=None,
                        help="train this many steps instead of --settle-minutes (a busy machine runs fewer per minute)")
    parser.add_argument("--eval-size", type=int, default=1000)
    args = parser.parse_args()
    pin_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    task = ArithmeticTask(num_operands=args.num_operands)

    if args.settle_check:
        settle_mix = args.worked_fraction if args.final_worked_fraction is None else args.final_worked_fraction
        model, tokenizer = load_model(str(args.out)), load_tokenizer(str(args.out))
        saved = args.out / OPTIMIZER_FILE
        moments = torch.load(saved, weights_only=True)["optimizer"]["state"] if saved.exists() else None
        before = held_out_accuracy(model, tokenizer, task, args.eval_size)
        # measure the step rate, then train for the requested wall time at a small constant LR
        started, probe = time.time(), 20
        optimizer = train(model, tokenizer, task, steps=probe, batch=args.batch, lr=args.settle_lr, warmup=0,
                          schedule="constant", seed=args.seed + 1, log_every=10**9,
                          worked_fraction=settle_mix, terse_accuracy=args.terse_accuracy,
                          eval_size=args.eval_size, moments=moments)
        steps = args.settle_steps or int(args.settle_minutes * 60 / ((time.time() - started) / probe))
        train(model, tokenizer, task, steps=steps, batch=args.batch, lr=args.settle_lr, warmup=0,
              schedule="constant", seed=args.seed + 2, log_every=10**9, worked_fraction=settle_mix,
              terse_accuracy=args.terse_accuracy, eval_size=args.eval_size, moments=optimizer.state_dict()["state"])
        after = held_out_accuracy(model, tokenizer, task, args.eval_size)
        print(json.dumps({"held_out_prompts": args.eval_size, "settle_lr": args.settle_lr, "settle_steps": steps + probe,
                          "accuracy_before": before, "accuracy_after": after,
                          "change_points": round(100 * (after - before), 2)}))
        return

    tokenizer = build_tokenizer(with_marker=args.worked_fraction > 0 or bool(args.final_worked_fraction))
    model = build_model(tokenizer, args.hidden, args.layers, args.heads)
    print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
    optimizer = train(model, tokenizer, task, steps=args.steps, batch=args.batch, lr=args.lr, warmup=args.warmup,
                      schedule="cosine", seed=args.seed, worked_fraction=args.worked_fraction,
                      final_worked_fraction=args.final_worked_fraction, final_steps=args.final_steps,
                      eval_size=args.eval_size, terse_accuracy=args.terse_accuracy)
    if tokenizer.convert_tokens_to_ids(WORK_MARKER) != tokenizer.unk_token_id:
        print("held-out greedy accuracy by route:", json.dumps(route_accuracies(model, tokenizer, task, args.eval_size)))
    args.out.mkdir(parents=True, exist_ok=True)
    # the optimizer's moments travel with the model: RL warm-starts AdamW from them
    torch.save({"optimizer": optimizer.state_dict()}, args.out / OPTIMIZER_FILE)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"saved to {args.out}")


if __name__ == "__main__":
    main()
