"""GPU check: echo2's own sampler, log-prob recomputation and learner step on a SmolLM2-135M-shaped model.

    python bench/gpu_check.py [--quick] [--out DIR] [--device cuda|cpu] [--tiny]

The model has SmolLM2-135M's architecture (a transformers ``LlamaConfig``: 30 layers, hidden 576,
9 heads of 64, 3 KV heads, 49152-token vocabulary, tied embeddings) with DUMMY weights (seeded
random initialisation, no download): what is measured is speed and numerics, not quality. A
random model's next-token distribution is nearly uniform (log-probs about -ln 49152 = -10.8), so
the log-prob differences below are those of bf16 arithmetic on such logits, which may be smaller
than on a trained model's peaked ones. ``--tiny`` shrinks the model to 2 layers of hidden 64 and a
4096-token vocabulary for smoke runs on a CPU. No EOS is ever produced (its id is -1), so every row
generates exactly ``max_new_tokens`` tokens.

Rows of the table (one ``check`` each):

* ``generate``: :func:`echo2.model.sampling.sample` (the hf engine's sampler) in bf16, 64 rows of
  ~48-token prompts: ``shared 8x8`` (8 distinct prompts, each the prompt of a group of 8 rows, which
  :func:`echo2.model.tokens.prefill` runs once) vs ``distinct 64`` (no sharing); samples/s and
  generated tokens/s for ``max_new_tokens`` 16 and 256 (16 only with ``--quick``, 8 with
  ``--quick --tiny``). Tokens are drawn by the verifiable rule (:mod:`echo2.model.draws`), as the
  hf engine draws them: one uniform per row and token, computed on the host, the inverse CDF on
  the device.
* ``logprobs``: behaviour log-probs from sampling in bf16 (as a worker does) against
  :func:`echo2.learner.logprobs.completion_scores` on the fp32 master copy of the same weights under
  ``ComputePrecision("bfloat16", device)`` autocast (as the learner does): mean and max absolute
  per-token difference in nats, against echo2's verification tolerance (``logprob_tolerance`` 0.2
  mean abs nats/token by default; 0.3 in the SmolLM2 recipe). fp32 vs fp32 is the reference, and
  bf16 sampling vs fp32 scoring without autocast is shown for comparison.
* ``learner``: :class:`echo2.learner.trainer.Learner` steps (GRPO, lr 1e-6, fresh AdamW, bf16
  compute) on 8 groups of 8 completions that the sampler produced above, rewards alternating 1/0
  so every advantage is +-1: full fine-tuning and a LoRA adapter (:func:`echo2.model.lora.add_adapter`),
  each with trainable parameters held in fp32 (:func:`echo2.learner.precision.hold_master_weights`,
  the master weights) and in bf16 (no master copy). After the first step: max |delta| of the
  trainable parameters and the fraction left unchanged; after the second, the fraction still
  unchanged (a fresh LoRA adapter's B is zero, so its A gets no gradient in the first step: about
  half the adapter cannot move before the second step, whatever the precision); first- and
  second-step seconds and peak CUDA memory (``torch.cuda.max_memory_allocated``: model, optimizer,
  activations).
* ``vllm``: vLLM's engine with ``load_format="dummy"`` when ``import vllm`` works; otherwise the row
  records that it is not installed (``pip install 'echo2[vllm]'`` brings it with the CUDA torch
  build it pins), so that its throughput and in-place loading were not measured.

The Learner needs a tokenizer only for ``pad_token_id`` and to encode each group's prompt text
(``tokenizer(prompts)["input_ids"]`` in ``Rollouts.from_groups``): :class:`IdTokenizer` is a
stand-in whose "text" is the prompt's token ids written out, so the dummy model's 49152-token
vocabulary needs no real tokenizer.
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import platform
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import common  # noqa: E402
import torch  # noqa: E402
from common import format_table, write_results  # noqa: E402

from echo2.config import LoraConfig, load_config  # noqa: E402
from echo2.exchange import Group  # noqa: E402
from echo2.learner.logprobs import completion_scores  # noqa: E402
from echo2.learner.precision import ComputePrecision, hold_master_weights  # noqa: E402
from echo2.learner.trainer import Learner  # noqa: E402
from echo2.model.decoding import Decoder, StaticDecoder  # noqa: E402
from echo2.model.draws import Draws  # noqa: E402
from echo2.model.lora import add_adapter  # noqa: E402
from echo2.model.sampling import Samples, sample  # noqa: E402
from echo2.protocol import AdapterSpec  # noqa: E402
from echo2.tasks import Example  # noqa: E402

PAD_ID = 0
NO_EOS = -1
"""An id no token has: every row generates ``max_new_tokens`` tokens (fixed work per measurement)."""
GROUPS, GROUP_SIZE = 8, 8
PROMPT_TOKENS = (44, 52)
"""Prompt lengths are drawn uniformly from this inclusive range (~48 tokens)."""
LOGPROB_TOLERANCE = 0.2
"""echo2's verification default (``verification.logprob_tolerance``), mean abs nats/token."""
RECIPE_TOLERANCE = 0.3
"""The SmolLM2-135M recipe's (configs/smollm2-135m-chain-sum.yaml): bf16 sampling vs bf16 scoring."""
LR = 1e-6
GIB = 2**30

SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                    rms_norm_eps=1e-5, max_position_embeddings=8192)
TINY = {**SMOLLM2_135M, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096}


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--tiny", action="store_true", help="2 layers, hidden 64, 4096 tokens: a CPU smoke run")
    parser.add_argument("--recipe-model", type=Path, default=None,
                        help="also run the SmolLM2 recipe end to end from this HF folder (config + tokenizer)")
    parser.add_argument("--recipe-steps", type=int, default=40)
    parser.add_argument("--recipe-leases", default="4,device",
                        help="rollout.groups_per_lease of each recipe run (comma-separated)")
    parser.add_argument("--checks", default="generate,logprobs,learner,vllm",
                        help="comma-separated checks to run (a lent GPU's time is short)")
    parser.add_argument("--profile", action="store_true",
                        help="print the fast path's costliest operations at 256 rows (torch.profiler)")


def parse_args() -> argparse.Namespace:
    args = common.parse_args(__doc__.splitlines()[0], "bench/out/gpu_check", _options)
    args.device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    args.new_tokens = [16, 256] if not args.quick else [8] if args.tiny else [16]
    args.rows = [64, 256, 1024] if not args.quick else [16]
    args.reps = 1 if args.quick else 2
    return args


class IdTokenizer:
    """The two things :class:`Learner` asks of a tokenizer: ``pad_token_id``, and ``tokenizer(texts)["input_ids"]``
    — here a text is its token ids separated by spaces (see :func:`as_text`)."""

    pad_token_id = PAD_ID
    eos_token_id = None

    def __call__(self, texts: list[str]) -> dict[str, list[list[int]]]:
        return {"input_ids": [[int(t) for t in text.split()] for text in texts]}


def as_text(ids: list[int]) -> str:
    return " ".join(map(str, ids))


def build_model(shape: dict[str, Any], device: torch.device) -> torch.nn.Module:
    """SmolLM2-135M's architecture, seeded random weights, float32, on ``device``, eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    with device:
        model = LlamaForCausalLM(LlamaConfig(**shape, pad_token_id=PAD_ID))
    return model.eval()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    sync(device)
    started = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - started


def make_prompts(vocab: int, rows: int) -> list[list[int]]:
    """``rows`` prompt rows, group by group: ``rows / GROUP_SIZE`` distinct prompts of ~48 tokens, each
    repeated for its group's ``GROUP_SIZE`` rows (as a worker's lease lays them out)."""
    rng = torch.Generator().manual_seed(rows)
    distinct = [torch.randint(1, vocab, (int(torch.randint(PROMPT_TOKENS[0], PROMPT_TOKENS[1] + 1, (1,),
                                                           generator=rng)),), generator=rng).tolist()
                for _ in range(rows // GROUP_SIZE)]
    return [prompt for prompt in distinct for _ in range(GROUP_SIZE)]


def draw(model: torch.nn.Module, prompts: list[list[int]], new_tokens: int, seed: int,
         decoder: Decoder | None = None) -> Samples:
    """Sample as the hf engine does (the verifiable draws of ``seed``)."""
    return sample(model, prompts, max_new_tokens=new_tokens, eos_id=NO_EOS, pad_id=PAD_ID,
                  draws=Draws.seeded(seed, len(prompts)), decoder=decoder)


def generation_rows(worker: torch.nn.Module, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Today's path (dynamic cache, one launch per kernel) against the fast path (static cache, each
    step a replayed CUDA graph; eager on a CPU), side by side at every (rows, new tokens)."""
    fast = StaticDecoder(graphs=args.device.type == "cuda")
    # warm-up at the largest shapes: the first draw at a new size grows the CUDA caching allocator,
    # which cost the first layout timed after it ~18 ms a token on an H200
    draw(worker, make_prompts(worker.config.vocab_size, max(args.rows)), max(args.new_tokens), seed=0)
    rows = []
    for batch in args.rows:
        prompts = make_prompts(worker.config.vocab_size, batch)
        for new_tokens in args.new_tokens:
            speeds: dict[str, float] = {}
            for name, decoder in (("today (dynamic cache)", None), ("fast (static cache + CUDA graph)", fast)):
                if decoder is not None:  # the first call of a shape captures its graph: timed apart
                    _, capture_s = timed(lambda: draw(worker, prompts, new_tokens, 0, decoder), args.device)
                reps = 1 if decoder is None and new_tokens == max(args.new_tokens) and not args.quick else args.reps
                seconds = []
                for rep in range(reps):
                    samples, dt = timed(lambda: draw(worker, prompts, new_tokens, rep + 1, decoder), args.device)
                    seconds.append(dt)
                dt = sum(seconds) / len(seconds)
                speeds[name] = samples.num_tokens / dt
                rows.append({"check": "generate", "variant": name, "rows": batch, "new_tokens": new_tokens,
                             "seconds": dt, "samples_per_s": batch / dt, "tokens_per_s": speeds[name],
                             "speedup": speeds[name] / speeds["today (dynamic cache)"],
                             "first_call_s": capture_s if decoder is not None else None,
                             "note": f"bf16, {batch // GROUP_SIZE} prompts x {GROUP_SIZE}, mean of {reps}"})
                print(f"== generate {name} {batch}x{new_tokens}: {dt:.3f}s, {speeds[name]:.0f} tokens/s",
                      flush=True)
    return rows


@torch.no_grad()
def logprob_gap(samples: Samples, scorer: torch.nn.Module, prompts: list[list[int]],
                precision: ComputePrecision) -> tuple[float, float]:
    """Mean and max |behaviour - recomputed| log-prob over every sampled token."""
    with precision():
        scores = completion_scores(scorer, prompts, samples.completion_ids, pad_id=PAD_ID)
    behaviour = torch.zeros_like(scores.logprobs)
    for row, logprobs in enumerate(samples.logprobs):
        behaviour[row, : len(logprobs)] = torch.tensor(logprobs, device=behaviour.device)
    gap = (behaviour - scores.logprobs).abs()[scores.mask.bool()]
    return float(gap.mean()), float(gap.max())


def logprob_rows(worker: torch.nn.Module, master: torch.nn.Module, shared: list[list[int]], new_tokens: int,
                 device: torch.device) -> tuple[list[dict[str, Any]], Samples]:
    bf16_samples = draw(worker, shared, new_tokens, seed=1)
    fast_samples = draw(worker, shared, new_tokens, seed=1, decoder=StaticDecoder(graphs=device.type == "cuda"))
    fp32_samples = draw(master, shared, new_tokens, seed=1)
    autocast = ComputePrecision("bfloat16", device.type)
    cases = [("bf16 sample vs fp32 master + bf16 autocast", bf16_samples, autocast),
             ("fast path: bf16 sample vs fp32 master + bf16 autocast", fast_samples, autocast),
             ("bf16 sample vs fp32 master, no autocast", bf16_samples, ComputePrecision("float32", device.type)),
             ("fp32 sample vs fp32 score (reference)", fp32_samples, ComputePrecision("float32", device.type))]
    rows = []
    for name, samples, precision in cases:
        mean, worst = logprob_gap(samples, master, shared, precision)
        mean_logprob = sum(map(sum, samples.logprobs)) / samples.num_tokens
        rows.append({"check": "logprobs", "variant": name, "rows": len(samples.completion_ids),
                     "new_tokens": new_tokens, "mean_abs_nats": mean, "max_abs_nats": worst,
                     "tolerance": LOGPROB_TOLERANCE, "ok": mean <= LOGPROB_TOLERANCE,
                     "note": f"mean behaviour logprob {mean_logprob:.2f}"})
        print(f"== logprobs {name}: mean {mean:.2e} max {worst:.2e}", flush=True)
    same = sum(a == b for a, b in zip(fast_samples.completion_ids, bf16_samples.completion_ids))
    rows[1]["note"] += f"; {same}/{len(shared)} completions token-identical to today's path (same seed)"
    return rows, bf16_samples


def make_groups(shared: list[list[int]], samples: Samples) -> list[Group]:
    """The 8 groups of 8 sampled rows, rewards 1, 0, 1, 0, ... (every advantage non-zero)."""
    groups = []
    for g in range(GROUPS):
        span = slice(g * GROUP_SIZE, (g + 1) * GROUP_SIZE)
        groups.append(Group(slot=g, example=Example(prompt=as_text(shared[g * GROUP_SIZE]), answer=""), version=0,
                            worker_id="gpu_check", token_ids=samples.completion_ids[span],
                            logprobs=samples.logprobs[span], rewards=[float(i % 2 == 0) for i in range(GROUP_SIZE)]))
    return groups


def moved(trainable: dict[str, torch.Tensor], before: dict[str, torch.Tensor]) -> tuple[float, int, int]:
    """Max |delta| of the trainable parameters since ``before``, elements left unchanged, elements."""
    delta, unchanged, total = 0.0, 0, 0
    for name, parameter in trainable.items():
        diff = (parameter.detach().float() - before[name].float()).abs()
        delta = max(delta, float(diff.max()))
        unchanged += int((diff == 0).sum())
        total += diff.numel()
    return delta, unchanged, total


def learner_row(worker: torch.nn.Module, groups: list[Group], new_tokens: int, mode: str, held: str,
                device: torch.device) -> dict[str, Any]:
    """Two learner steps from the bf16 weights, trainable parameters held in ``held``."""
    config = load_config(overrides=["model.dtype=bfloat16", f"learner.master_dtype={held}", f"learner.lr={LR}",
                                    "learner.warm_start_optimizer=false", f"learner.groups_per_step={GROUPS}",
                                    f"rollout.group_size={GROUP_SIZE}", f"rollout.max_new_tokens={new_tokens}"])
    model = copy.deepcopy(worker)
    if mode == "lora":
        lora = LoraConfig()
        model = add_adapter(model, AdapterSpec(r=lora.r, alpha=lora.alpha, dropout=lora.dropout,
                                               target_modules=lora.target_modules))
    model = hold_master_weights(model, held).to(device)  # as echo2.launch.ranks.load_policy does
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    learner = Learner(model, IdTokenizer(), config.learner, config.rollout, compute_dtype="bfloat16")
    trainable = {name: p for name, p in learner.model.named_parameters() if p.requires_grad}
    before = {name: p.detach().clone() for name, p in trainable.items()}
    metrics, first_s = timed(partial(learner.step, groups, version=0), device)
    delta, unchanged, total = moved(trainable, before)
    _, second_s = timed(partial(learner.step, groups, version=1), device)
    _, unchanged_2, _ = moved(trainable, before)
    peak = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in trainable.values()})
    print(f"== learner {mode} held in {held}: step {first_s:.2f}s / {second_s:.2f}s, max delta {delta:.2e}, "
          f"unchanged {unchanged / total:.4f}", flush=True)
    del learner, model, trainable, before
    return {"check": "learner", "variant": f"{mode}, trainable in {held}", "rows": GROUPS * GROUP_SIZE,
            "new_tokens": new_tokens, "trainable_params": total, "step_s": first_s, "warm_step_s": second_s,
            "peak_mem_gib": peak, "max_abs_delta": delta, "unchanged_frac": unchanged / total,
            "unchanged_frac_2steps": unchanged_2 / total,
            "loss": metrics.get("loss"), "ok": delta > 0,
            "note": f"lr {LR:g}, bf16 autocast, {'/'.join(dtypes)} params"}


def vllm_row(shape: dict[str, Any], shared: list[list[int]], new_tokens: int, device: torch.device) -> dict[str, Any]:
    """vLLM's own engine on the same architecture with ``load_format="dummy"``, when vLLM is installed."""
    base = {"check": "vllm", "variant": f"load_format=dummy, {len(shared)} rows", "new_tokens": new_tokens}
    if importlib.util.find_spec("vllm") is None:
        return {**base, "ok": None, "note": "vLLM not installed (pip install 'echo2[vllm]'): its throughput and "
                                            "in-place loading not measured"}
    if device.type != "cuda":
        return {**base, "ok": None, "note": "vLLM installed but needs a CUDA device: not run"}
    import json
    import tempfile

    try:
        from transformers import LlamaConfig
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        with tempfile.TemporaryDirectory() as folder:
            config = LlamaConfig(**shape, pad_token_id=PAD_ID, architectures=["LlamaForCausalLM"])
            (Path(folder) / "config.json").write_text(json.dumps(config.to_dict()))
            llm = LLM(model=folder, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
                      gpu_memory_utilization=0.5, seed=0)
            params = SamplingParams(max_tokens=new_tokens, ignore_eos=True, logprobs=0, temperature=1.0,
                                    detokenize=False)
            prompts = [TokensPrompt(prompt_token_ids=p) for p in shared]
            llm.generate(prompts[:GROUP_SIZE], params, use_tqdm=False)  # warm-up
            outputs, dt = timed(lambda: llm.generate(prompts, params, use_tqdm=False), device)
            tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
        return {**base, "rows": len(outputs), "seconds": dt, "samples_per_s": len(outputs) / dt,
                "tokens_per_s": tokens / dt, "ok": True, "note": "in-place weight loading not measured"}
    except Exception as error:  # noqa: BLE001 - recorded, the other checks stand
        return {**base, "ok": False, "note": f"vLLM failed: {type(error).__name__}: {str(error)[:200]}"}


def profile_fast_path(worker: torch.nn.Module, out: Path) -> None:
    """Where a fast-path step's time goes (device kernels and host calls), 256 rows x 32 tokens."""
    from torch.profiler import ProfilerActivity, profile

    prompts, decoder = make_prompts(worker.config.vocab_size, 256), StaticDecoder()
    draw(worker, prompts, 32, 0, decoder)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        draw(worker, prompts, 32, 1, decoder)
    table = trace.key_averages().table(sort_by="self_cuda_time_total", row_limit=15)
    (out / "profile.txt").parent.mkdir(parents=True, exist_ok=True)
    (out / "profile.txt").write_text(table)
    print(table, flush=True)


RECIPE = Path(__file__).parent.parent / "configs" / "smollm2-135m-chain-sum.yaml"


def recipe_row(model_dir: Path, steps: int, leases: str) -> dict[str, Any]:
    """The SmolLM2 recipe end to end on the device (learner and one worker sharing it), from
    ``model_dir``: an HF folder of SmolLM2-135M-Instruct's config and tokenizer. Where the folder has
    no weights, seeded random ones are written into it (the 98 MB model file does not travel to a
    lent GPU machine): speed, not learning — a random model never stops before ``max_new_tokens``.
    ``leases`` is ``rollout.groups_per_lease``: the recipe's fixed 4, or ``device`` (sized to the
    card's free memory, capped by the staleness window)."""
    import re
    import subprocess
    import tempfile

    from transformers import AutoConfig, AutoModelForCausalLM

    made_here = model_dir / "DUMMY_WEIGHTS"
    if not (model_dir / "model.safetensors").exists():
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir)).save_pretrained(model_dir)
        made_here.touch()
    weights = "dummy (seeded random init)" if made_here.exists() else "real"
    runs = Path(tempfile.mkdtemp(prefix="gpu-recipe-"))
    command = [sys.executable, "-m", "echo2.cli", "train", "--config", str(RECIPE), f"model.name={model_dir}",
               f"task.options.chat_template={model_dir}", f"run.dir={runs}", "run.name=recipe",
               f"rollout.groups_per_lease={leases}",
               "learner.device=cuda", "workers.device=cuda", f"run.steps={steps}", "eval.every=1000", "eval.size=64"]
    print("== recipe:", " ".join(command), flush=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=150)
    except subprocess.TimeoutExpired as timeout:
        done = subprocess.CompletedProcess(command, returncode=-1, stdout=str(timeout.stdout or ""),
                                           stderr=f"timed out after {timeout.timeout:.0f} s")
    summary_file = runs / "recipe" / "summary.txt"
    output = summary_file.read_text() if summary_file.exists() else done.stdout + done.stderr
    summary = re.search(r"(\d+) steps in (\d+)s \| (\d+) samples/s", output)
    granted = re.search(r"leases (\d+) issued.*groups (\d+) accepted", output)
    row = {"check": "recipe", "variant": f"smollm2-135m-chain-sum, groups_per_lease={leases}, {weights} weights, "
                                         "1 worker, same GPU",
           "rows": None, "new_tokens": 16, "ok": done.returncode == 0 and summary is not None,
           "note": " | ".join(line for line in output.splitlines() if "steps in" in line)[-300:]}
    if summary:
        steps_done, wall, rate = map(int, summary.groups())
        row.update(seconds=wall, samples_per_s=rate, steps=steps_done)
    if granted:
        issued, groups = map(int, granted.groups())
        row.update(leases=issued, groups_per_lease=groups / max(issued, 1))
        row["note"] += f" | {groups} groups in {issued} leases"
    if not summary:
        row["note"] = (done.stdout + done.stderr)[-600:]
    print(f"== recipe: {row}", flush=True)
    return row


def main() -> None:
    args = parse_args()
    device, shape = args.device, TINY if args.tiny else SMOLLM2_135M
    master = build_model(shape, device)
    worker = copy.deepcopy(master).to(torch.bfloat16)  # what a worker samples with (model.dtype bfloat16)
    master = hold_master_weights(copy.deepcopy(worker), "float32")  # the learner's fp32 copy of the same weights
    shared = make_prompts(shape["vocab_size"], GROUPS * GROUP_SIZE)
    longest = max(args.new_tokens)
    checks = set(args.checks.split(","))
    rows = generation_rows(worker, args) if "generate" in checks else []
    if args.profile and args.device.type == "cuda":
        profile_fast_path(worker, args.out)
    if checks & {"logprobs", "learner"}:
        scored, samples = logprob_rows(worker, master, shared, longest, device)
        rows += scored
    del master
    if "learner" in checks:
        groups = make_groups(shared, samples)
        for mode in ("full", "lora"):
            for held in ("float32", "bfloat16"):
                rows.append(learner_row(worker, groups, longest, mode, held, device))
    if "vllm" in checks:
        rows.append(vllm_row(shape, shared, longest, device))
    if args.recipe_model:
        rows += [recipe_row(args.recipe_model, args.recipe_steps, leases) for leases in args.recipe_leases.split(",")]
    columns = ["check", "variant", "rows", "new_tokens", "seconds", "samples_per_s", "tokens_per_s", "speedup",
               "first_call_s", "groups_per_lease", "mean_abs_nats", "max_abs_nats", "step_s", "warm_step_s", "peak_mem_gib", "max_abs_delta",
               "unchanged_frac", "unchanged_frac_2steps", "ok", "note"]
    import transformers

    meta = {"quick": args.quick, "tiny": args.tiny, "device": str(device),
            "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                            else f"cpu ({platform.machine()})"),
            "torch": torch.__version__, "transformers": transformers.__version__, "model_shape": shape,
            "weights": "dummy (seeded random init)", "groups": GROUPS, "group_size": GROUP_SIZE,
            "prompt_tokens": list(PROMPT_TOKENS), "logprob_tolerance": LOGPROB_TOLERANCE,
            "recipe_logprob_tolerance": RECIPE_TOLERANCE, "lr": LR,
            "vllm_installed": importlib.util.find_spec("vllm") is not None}
    print(f"\n{'tiny ' if args.tiny else ''}SmolLM2-135M architecture, dummy weights, on {meta['device_name']}; "
          f"log-prob tolerance {LOGPROB_TOLERANCE} mean abs nats/token (recipe {RECIPE_TOLERANCE})")
    print(format_table(rows, columns))
    path = write_results(args.out, rows, meta, models=())  # dummy weights, no model file to hash
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
