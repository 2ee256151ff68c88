"""The Tinker API vs echo2's own loop: an unmodified tinker-cookbook recipe trains through ``echo2 serve``.

    python bench/tinker_service.py [--quick] [--out DIR] [--runs api-sync,api-async2,native,api-lab]

Each arm runs alone, one after the other, on SmolLM2-135M-Instruct with the same settings: groups of
4, 8 groups a step, a rank-32 LoRA (alpha 32), AdamW at 2e-4, 5 tokens a reply, temperature 1.

- ``api-sync``: ``echo2 serve`` (one local worker samples) and the cookbook's own
  ``tinker_cookbook.recipes.math_rl.train env=arithmetic`` (0.5.8, in its own virtualenv,
  ``.venv-cookbook``), ``loss_fn=importance_sampling``, renderer ``qwen3_instruct`` (ChatML,
  SmolLM2's own format: with ``role_colon`` SmolLM2 never writes the recipe's stop sequence).
- ``api-async2``: the same with ``max_steps_off_policy=2`` (the cookbook's async loop).
- ``native``: ``echo2 train`` on the same problem (``bench/cookbook_arithmetic.py``: the recipe's
  prompts and reward), ``dr_grpo`` (mean baseline, no std or length normalisation: what the recipe's
  advantages are), synchronous, one worker.
- ``api-lab``: ``api-sync`` with the service on a lab host and its sampling done by ``echo2
  worker`` on two other lab hosts behind shaped links (``LINK_MBPS``); the recipe runs on the
  service's host. Root only (network namespaces); skipped with the reason elsewhere.

Per arm: samples/s (sampled completions over the training loop's wall time), seconds a step, the
reward over the first and last steps and its rise in units of its standard error (``rise_z``), the
recipe's format and correctness shares, the time to reach ``LEVEL`` (a 3-step trailing mean), and
for the API arms the API layer's own share of the step time: ``api_s``, the seconds the service's
routes spent handling requests (parsing, checking, queueing, encoding; long-poll waits excluded),
and ``train_rpc_s``, what the client's ``forward_backward`` + ``optim_step`` round trips took beyond
the training they ran (serialisation, HTTP, futures, turns), both over the loop's wall time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, mean_std, parse_args, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402
from echo2.model.sources import resolve_model_path  # noqa: E402
from echo2.telemetry.metrics import read_jsonl  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COOKBOOK_PYTHON = ROOT / ".venv-cookbook" / "bin" / "python"
MODEL = "smollm2-135m-instruct"
GROUP, GROUPS, RANK, LR, MAX_TOKENS = 4, 8, 32, 2e-4, 5
#: The reward a run must reach (3-step trailing mean): every reply well formed, none right, is 0.0.
LEVEL = -0.01
#: Steps averaged at each end of a run for the rise.
ENDS = 3
LINK_MBPS = 100.0
ARMS = ("api-sync", "api-async2", "native", "api-lab")


def recipe_arguments(url: str, log_path: Path, steps: int, off_policy: int | None) -> list[str]:
    return ["env=arithmetic", f"base_url={url}", f"model_name={resolve_model_path(MODEL)}",
            "renderer_name=qwen3_instruct", "loss_fn=importance_sampling", f"groups_per_batch={GROUPS}",
            f"group_size={GROUP}", f"max_tokens={MAX_TOKENS}", f"max_steps={steps}", f"lora_rank={RANK}",
            f"learning_rate={LR}", f"log_path={log_path}", "behavior_if_log_dir_exists=delete", "eval_every=0",
            "save_every=0", *([f"max_steps_off_policy={off_policy}"] if off_policy else [])]


def serve_command(folder: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "echo2.cli", "serve", f"service.dir={folder}", f"model.name={MODEL}",
            f"service.max_tokens={MAX_TOKENS}", "service.lora_alpha=32", *overrides]


def wait_for_file(path: Path, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"the service exited ({process.returncode}) before writing {path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} not written within {timeout_s:.0f}s")
        time.sleep(0.5)


def service_view(folder: Path, url: str) -> dict[str, Any]:
    token = (folder / "token").read_text().strip()
    return httpx.get(f"{url}/v1/dashboard", headers={"X-Echo2-Token": token}, timeout=30).json()["service"]


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def api_arm(name: str, out: Path, steps: int, off_policy: int | None, lab=None) -> dict[str, Any]:
    """The recipe against a service started for it (on ``lab``'s hosts when given)."""
    folder, log_path = out / name / "service", out / name / "recipe"
    folder.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1"}
    workers: list[subprocess.Popen] = []
    if lab is None:
        service = subprocess.Popen(serve_command(folder, "workers.count=1"), stdout=(out / name / "serve.log").open("w"),
                                   stderr=subprocess.STDOUT)
    else:
        service = lab.popen("service", serve_command(folder, "workers.count=0",
                                                     f"coordinator.host={lab.own_address('service')}"),
                            stdout=(out / name / "serve.log").open("w"), stderr=subprocess.STDOUT)
    try:
        wait_for_file(folder / "coordinator.json", service, 300)
        url = json.loads((folder / "coordinator.json").read_text())["url"]
        if lab is not None:
            for host in ("w1", "w2"):
                workers.append(lab.popen(host, [
                    sys.executable, "-m", "echo2.cli", "worker", "--coordinator", url, "--token-file",
                    str(folder / "token"), "--name", host, "--threads", "1", "--upload-mbps", str(LINK_MBPS),
                    "--relay-host", "0.0.0.0", "--advertise-host", lab.own_address(host)],
                    stdout=(out / name / f"{host}.log").open("w"), stderr=subprocess.STDOUT))
        environment["TINKER_API_KEY"] = (folder / "api_key").read_text().strip()
        command = [str(COOKBOOK_PYTHON), "-m", "tinker_cookbook.recipes.math_rl.train",
                   *recipe_arguments(url, log_path, steps, off_policy)]
        started = time.time()
        with (out / name / "recipe.log").open("w") as recipe_log:
            if lab is None:
                run = subprocess.run(command, stdout=recipe_log, stderr=subprocess.STDOUT, env=environment,
                                     cwd=out / name, timeout=3600)
            else:
                run = lab.run("service", command, stdout=recipe_log, stderr=subprocess.STDOUT, env=environment,
                              cwd=out / name, timeout=3600)
        wall = time.time() - started
        if run.returncode != 0:
            raise RuntimeError(f"{name}: the recipe failed ({run.returncode}); see {out / name / 'recipe.log'}")
        view = (service_view(folder, url) if lab is None
                else json.loads(lab.run("service", [sys.executable, "-c", VIEW, str(folder), url], capture_output=True,
                                        text=True, timeout=60).stdout))
        rss = peak_rss_mb(service.pid)
    finally:
        for process in (*workers, service):
            stop(process)
    records = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "env/all/reward/total" in r]
    loop_s = sum(r["time/total"] for r in records)
    elapsed = [sum(r["time/total"] for r in records[: k + 1]) for k in range(len(records))]
    train_s = sum(r["time/train_step"] for r in records)
    samples = sum(r["env/all/total_episodes"] for r in records)
    return {
        **curve(name, [r["env/all/reward/total"] for r in records], elapsed, samples, loop_s, wall),
        "format_first": _mean([r["env/all/format"] for r in records[:ENDS]]),
        "format_last": _mean([r["env/all/format"] for r in records[-ENDS:]]),
        "correct_first": _mean([r["env/all/correct"] for r in records[:ENDS]]),
        "correct_last": _mean([r["env/all/correct"] for r in records[-ENDS:]]),
        "kl_sample_train": max(abs(r["optim/kl_sample_train_v1"]) for r in records),
        "api_requests": view["api_requests"], "api_s": view["api_s"], "training_s": view["training_s"],
        "train_rpc_s": train_s - view["training_s"], "api_share": view["api_s"] / loop_s,
        "train_rpc_share": (train_s - view["training_s"]) / loop_s, "samples_returned": view["samples_returned"],
        "audited": view["audited"], "audits_failed": view["audits_failed"], "service_peak_rss_mb": rss,
    }


#: Run on a lab host: the service's dashboard reading (its address is the host's own).
VIEW = """
import json, sys
from pathlib import Path
import httpx
token = (Path(sys.argv[1]) / "token").read_text().strip()
print(json.dumps(httpx.get(sys.argv[2] + "/v1/dashboard", headers={"X-Echo2-Token": token}, timeout=30).json()["service"]))
"""


def native_arm(out: Path, steps: int) -> dict[str, Any]:
    """``echo2 train`` on the recipe's problem with the recipe's settings."""
    started = time.time()
    summary = run_training(load_config(overrides=[
        f"model.name={MODEL}", "task.name=cookbook_arithmetic:CookbookArithmetic",
        f"task.options.max_tokens={MAX_TOKENS}", "protocol=sync", f"run.steps={steps}", f"run.dir={out}",
        "run.name=native", f"rollout.group_size={GROUP}", f"learner.groups_per_step={GROUPS}",
        f"rollout.max_new_tokens={MAX_TOKENS}", "rollout.temperature=1.0", "learner.loss=dr_grpo",
        "learner.lora.enabled=true", f"learner.lora.r={RANK}", "learner.lora.alpha=32", f"learner.lora.lr={LR}",
        "workers.count=1", f"eval.every={steps}", "eval.size=16", "eval.show=0", "eval.sampled=false", "telemetry.progress=false",
        "telemetry.tensorboard=false", "checkpoint.every=0"]))
    wall = time.time() - started
    records = [r for r in read_jsonl(summary.run_dir / "metrics.jsonl") if "reward_mean" in r and "loss" in r]
    first = records[0]["time"] - summary.result.wall_seconds / max(summary.result.steps, 1)
    elapsed = [r["time"] - first for r in records]
    return curve("native", [r["reward_mean"] for r in records], elapsed, summary.result.samples,
                 summary.result.wall_seconds, wall)


def curve(name: str, rewards: list[float], elapsed: list[float], samples: int, loop_s: float,
          wall: float) -> dict[str, Any]:
    """What every arm reports of its reward curve and pace."""
    first, first_sd = mean_std(rewards[:ENDS])
    last, last_sd = mean_std(rewards[-ENDS:])
    standard_error = ((first_sd ** 2 + last_sd ** 2) / ENDS) ** 0.5
    trailing = [_mean(rewards[max(0, k - 2): k + 1]) for k in range(len(rewards))]
    reached = next((elapsed[k] for k, value in enumerate(trailing) if k >= 2 and value >= LEVEL), None)
    return {"arm": name, "steps": len(rewards), "samples": samples, "samples_per_s": samples / loop_s,
            "step_s": loop_s / len(rewards), "wall_s": wall, "reward_first": first, "reward_last": last,
            "rise": last - first, "rise_z": (last - first) / standard_error if standard_error else None,
            "time_to_level_s": reached, "rewards": rewards, "elapsed_s": elapsed}


def _mean(values: list[float]) -> float:
    return mean_std(values)[0]


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for row in rows:
        steps = range(1, len(row["rewards"]) + 1)
        axes[0].plot(steps, row["rewards"], marker=".", label=row["arm"])
        axes[1].plot(row["elapsed_s"], row["rewards"], marker=".", label=row["arm"])
    for axis, label in zip(axes, ("step", "seconds of training loop")):
        axis.axhline(LEVEL, color="grey", linestyle=":", linewidth=1)
        axis.set_xlabel(label)
        axis.set_ylabel("mean reward (correct + 0.1 (format - 1))")
        axis.legend()
    figure.suptitle(f"tinker-cookbook arithmetic on {MODEL}: through echo2 serve vs echo2's own loop")
    figure.tight_layout()
    path = out / "tinker_service.png"
    figure.savefig(path, dpi=120)
    return path


def lab_or_reason():
    from echo2.lab import HostSpec, Lab, LabUnavailable
    from echo2.lab.commands import require

    try:
        require(nat=False)
    except LabUnavailable as missing:
        return None, str(missing)
    return Lab([HostSpec(name, LINK_MBPS, LINK_MBPS) for name in ("service", "w1", "w2")]), None


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/tinker_service", lambda parser: parser.add_argument(
        "--runs", default=",".join(ARMS), help=f"comma-separated arms of {', '.join(ARMS)}"))
    args.out = args.out.resolve()  # the recipe runs in its arm's folder
    runs = args.runs.split(",")
    if unknown := set(runs) - set(ARMS):
        raise SystemExit(f"unknown arms {sorted(unknown)}: choose from {', '.join(ARMS)}")
    if not COOKBOOK_PYTHON.exists() and any(r.startswith("api") for r in runs):
        raise SystemExit(f"{COOKBOOK_PYTHON} is missing: build the cookbook's virtualenv as .ci/run does")
    steps = 3 if args.quick else 20
    rows, skipped = [], {}
    for arm in runs:
        print(f"== {arm} ({steps} steps)", flush=True)
        if arm == "native":
            rows.append(native_arm(args.out, steps))
        elif arm == "api-lab":
            lab, reason = lab_or_reason()
            if lab is None:
                skipped[arm] = reason
                print(f"   skipped: {reason}")
                continue
            with lab:
                rows.append(api_arm(arm, args.out, steps, None, lab))
        else:
            rows.append(api_arm(arm, args.out, steps, 2 if arm == "api-async2" else None))
    native = next((r for r in rows if r["arm"] == "native"), None)
    for row in rows:
        row["samples_per_s_vs_native"] = row["samples_per_s"] / native["samples_per_s"] if native else None
    columns = ["arm", "steps", "samples_per_s", "samples_per_s_vs_native", "step_s", "reward_first", "reward_last",
               "rise_z", "time_to_level_s", "format_first", "format_last", "correct_last", "api_share",
               "train_rpc_share"]
    print(format_table(rows, columns))
    for arm, reason in skipped.items():
        print(f"{arm}: skipped ({reason})")
    path = write_results(args.out, rows, {"quick": args.quick, "steps": steps, "level": LEVEL, "skipped": skipped,
                                          "settings": {"group": GROUP, "groups": GROUPS, "rank": RANK, "lr": LR,
                                                       "max_tokens": MAX_TOKENS, "link_mbps": LINK_MBPS}},
                         models=(MODEL,))
    print(f"wrote {path} and {plot(rows, args.out)}")


if __name__ == "__main__":
    main()
