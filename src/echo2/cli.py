"""Command line: ``echo2 train | serve | worker | calibrate | plan | eval | simulate | report | lab``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from echo2.config import ConfigError, load_config
from echo2.learner import interrupts

if TYPE_CHECKING:
    from echo2.rollout.options import WorkerOptions


def _train(args: argparse.Namespace) -> int:
    if args.help_config:
        from echo2.config.keys import help_lines

        print("\n".join(help_lines(every_key=args.help_config == "all")))
        return 0
    from echo2.launch.train import run_training

    resume = Path(args.resume) if args.resume else None
    if resume is not None:
        if args.config:
            raise ConfigError("--resume takes the run's own config.yaml; give changes as overrides instead of --config")
        if not (resume / "config.yaml").is_file():
            raise ConfigError(f"--resume {resume}: not a run directory (no config.yaml)")
    config = load_config(str(resume / "config.yaml") if resume else args.config, args.overrides)
    interrupts.install()  # a stop ends the step in hand, checkpoints it and shuts workers and coordinator down
    summary = run_training(config, resume_dir=resume)
    if summary is not None and summary.result.starved:  # checkpointed and reported, but not done
        print(f"echo2: {summary.result.starved}; see {summary.run_dir / 'reliability.json'}", file=sys.stderr)
        return 1
    return 0


#: What ``echo2 serve`` needs beyond a base install: the ``service`` extra's packages.
SERVICE_PACKAGES = ("tinker", "peft", "psutil")


def _serve_keys(args: argparse.Namespace) -> int:
    """``echo2 serve keys add NAME | revoke NAME | list [key=value ...]``: the service's tenants
    (:mod:`echo2.service.keys`), in the folder ``service.dir`` names; a running service sees the
    change at its next request."""
    from echo2.service.keys import ApiKeys, KeyStoreError

    words = [w for w in args.overrides[1:] if "=" not in w]
    config = load_config(args.config, [w for w in args.overrides[1:] if "=" in w])
    keys = ApiKeys(Path(config.service.dir))
    action, names = (words[0], words[1:]) if words else ("", [])
    try:
        if action == "list" and not names:
            for entry in keys.listing():
                revoked = entry.get("revoked_at")
                print(f"{entry['tenant']}\tissued {time.strftime('%Y-%m-%d %H:%M', time.localtime(entry['issued_at']))}"
                      f"\t{'revoked' if revoked else 'live'}")
        elif action == "add" and len(names) == 1:
            print(keys.issue(names[0]))  # shown once: only its hash is kept
        elif action == "revoke" and len(names) == 1:
            print(f"revoked {keys.revoke(names[0])} key(s) of {names[0]} (its saves stay)")
        else:
            raise ConfigError("usage: echo2 serve keys add NAME | revoke NAME | list [--config FILE] [service.dir=DIR]")
    except KeyStoreError as error:
        raise ConfigError(str(error)) from None
    return 0


def _serve(args: argparse.Namespace) -> int:
    if args.overrides[:1] == ["keys"]:
        return _serve_keys(args)
    if missing := [name for name in SERVICE_PACKAGES if importlib.util.find_spec(name) is None]:
        print(f"echo2: echo2 serve needs the service extra: pip install 'echo2[service]' "
              f"(missing: {', '.join(missing)})", file=sys.stderr)
        return 2
    from echo2.launch.serve import run_service

    run_service(load_config(args.config, args.overrides))
    return 0


def worker_options(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> WorkerOptions:
    """``echo2 worker``'s :class:`~echo2.rollout.options.WorkerOptions`: the options in
    ``$ECHO2_WORKER_OPTIONS`` (JSON; how ``echo2 train`` starts its local workers) when set, the
    flags given on the command line over them. The run token comes from the first of
    ``--token-file``, ``--token``, that JSON and ``$ECHO2_TOKEN``."""
    from pydantic import ValidationError

    from echo2.rollout.options import OPTIONS_ENV, TOKEN_ENV, WorkerOptions, read_token_file

    environ = os.environ if environ is None else environ
    try:
        values = json.loads(environ[OPTIONS_ENV]) if environ.get(OPTIONS_ENV) else {}
    except json.JSONDecodeError as error:
        raise ConfigError(f"${OPTIONS_ENV} is not valid JSON: {error}") from None
    given = {k: v for k, v in vars(args).items() if k in WorkerOptions.model_fields and k != "token"}
    values.update(given)
    if getattr(args, "token_file", None) is not None:
        try:
            values["token"] = read_token_file(args.token_file)
        except (OSError, ValueError) as error:
            raise ConfigError(f"--token-file: {error}") from None
    elif getattr(args, "token", None) is not None:
        print("echo2 worker: warning: --token is visible to every user of this machine (ps); "
              f"prefer --token-file PATH or ${TOKEN_ENV}", file=sys.stderr)
        values["token"] = args.token
    elif not values.get("token") and environ.get(TOKEN_ENV):
        values["token"] = environ[TOKEN_ENV]
    if not values.get("token"):
        raise ConfigError(f"no run token: give --token-file PATH (a file only you can read; echo2 train "
                          f"writes RUN_DIR/token) or set ${TOKEN_ENV}")
    if not values.get("coordinator"):
        raise ConfigError("no coordinator: give --coordinator URL")
    try:
        return WorkerOptions.model_validate(values)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise ConfigError(f"worker options: {problems}") from None


def _worker(args: argparse.Namespace) -> int:
    options = worker_options(args)  # before torch is imported: a wrong option is reported at once

    from echo2.rollout.client import CoordinatorUnreachable, RequestRefused
    from echo2.rollout.options import EXIT_TURNED_AWAY, OPTIONS_ENV, TOKEN_ENV, build_worker
    from echo2.rollout.worker import install_signal_handlers

    for name in (OPTIONS_ENV, TOKEN_ENV):  # the token stays with this process, not its children
        os.environ.pop(name, None)
    worker = build_worker(options)
    install_signal_handlers(worker)
    status = 0
    try:
        worker.run()
    except CoordinatorUnreachable as error:
        print(f"echo2 worker: {error}", file=sys.stderr)
        status = 1
    except RequestRefused as error:
        print(f"echo2 worker: {error}", file=sys.stderr)
        status = EXIT_TURNED_AWAY
    # The worker has deregistered and stopped its relay; leave now rather than wait on threads that
    # libraries leave behind (e.g. a server thread still finishing a peer's long-poll): a preempted
    # worker must be gone within a bounded time.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _eval(args: argparse.Namespace) -> int:
    from echo2.learner.precision import ComputePrecision
    from echo2.model.evaluation import evaluate
    from echo2.model.loading import load_model, load_tokenizer, pin_threads
    from echo2.model.lora import for_sampling
    from echo2.tasks import load_task

    checkpoint = Path(args.checkpoint)
    config_path = args.config
    run_config = checkpoint.parent.parent / "config.yaml"
    if config_path is None and run_config.exists():
        config_path = run_config
    config = load_config(config_path, args.overrides)
    pin_threads(args.threads)
    task = load_task(config.task.name, config.task.options)
    model, tokenizer = for_sampling(load_model(str(checkpoint), config.model.dtype)), load_tokenizer(str(checkpoint))
    with ComputePrecision(config.model.dtype)():
        result = evaluate(model, tokenizer, task, task.eval_examples(args.size),
                          max_new_tokens=config.rollout.max_new_tokens, temperature=config.rollout.temperature,
                          shown=config.eval.show)
    for prompt, completion, reward in result.examples:
        print(f"  {prompt}{completion}  (reward {reward:.2f})")
    print(f"held-out greedy accuracy {100 * result.accuracy:.1f}% | sampled reward {100 * result.sampled_reward:.1f}% "
          f"({args.size} prompts, {checkpoint})")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    import yaml

    from echo2.planning.calibration import calibrate_run, with_decode_curve

    if args.from_run:
        run_dir = Path(args.from_run)
    else:
        from echo2.launch.train import run_training

        interrupts.install()
        run_dir = run_training(load_config(args.config, args.overrides)).run_dir
    calibration = calibrate_run(run_dir)
    if args.decode_curve:
        print("timing the engine's decoding steps at 1 to 32 rows (echo2.model.decode_probe) ...", flush=True)
        calibration = with_decode_curve(calibration, load_config(str(run_dir / "config.yaml")))
    out = Path(args.out) if args.out else run_dir / "calibration.yaml"
    out.write_text(yaml.safe_dump(calibration.model_dump(mode="json"), sort_keys=False))
    print(out.read_text(), end="")
    print(f"wrote {out} (predict other configs: echo2 plan --calibration {out} ...; "
          f"echo2 simulate --calibration {out} ...)")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from echo2.planning.calibration import inventory_for, load_calibration
    from echo2.planning.inventory import load_inventory
    from echo2.planning.report import plan_lines
    from echo2.simulation.predict import fluid_model_limit, predict_config

    if args.scenario:
        return _plan_scenario(args)
    config = load_config(args.config, args.overrides)
    try:
        calibration = load_calibration(args.calibration) if args.calibration else None
        inventory = inventory_for(config, calibration) if calibration else load_inventory(args.inventory)
    except ValueError as error:
        print(f"echo2 plan: {error}", file=sys.stderr)
        return 2
    print("\n".join(plan_lines(config, inventory)))
    prediction = predict_config(config, calibration) if calibration else None
    if prediction is not None and prediction.method == "simulated":
        print(f"\nthe config as given is {fluid_model_limit(config)}; simulated instead (echo2 simulate "
              f"--calibration): utilization {100 * prediction.utilization:.1f}%, {prediction.step_s:.2f}s per step")
    return 0


def _plan_scenario(args: argparse.Namespace) -> int:
    """``echo2 plan --scenario``: the capacity model on a scenario's fleet (each class at the rate its
    leases drain at, with the scenario's response lengths) and its centralized baseline as engines
    behave, with each class's price per token against the co-located learner's."""
    from echo2.planning.payoff import Baseline, baseline_lines
    from echo2.planning.report import plan_lines
    from echo2.simulation.centralized import simulate_centralized
    from echo2.simulation.scenario import dotted_overrides, load_scenario

    if args.config:
        print("echo2 plan: a scenario carries its own recipe; give overrides such as recipe.staleness=2", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario, dotted_overrides(args.overrides))
        inventory = scenario.inventory()
    except ValueError as error:
        print(f"echo2 plan: {error}", file=sys.stderr)
        return 2
    print("\n".join(plan_lines(scenario.recipe, inventory, centralized=False)))
    centralized = simulate_centralized(scenario)
    if centralized is not None:
        baseline = Baseline(centralized.cost_per_step, centralized.generation_share, centralized.usd_per_token)
        per_token = {c.name: c.price_per_hour / 3600 / (c.rollouts_per_s * scenario.workload.response_tokens)
                     for c in inventory.workers}
        sampler = scenario.workload.sampler()
        print(f"\nresponse lengths: mean {scenario.workload.response_tokens:g} tokens, "
              f"{100 * sampler.capped_share:.1f}% at the cap" if sampler.varies else
              "\nresponse lengths: every response the mean (no workload.lengths)")
        print("\n".join(baseline_lines(baseline, per_token)))
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from echo2.simulation.engine import SimulationStalled, simulate
    from echo2.simulation.results import write_run_dir
    from echo2.simulation.scenario import dotted_overrides, load_scenario

    try:
        if args.calibration:
            from echo2.planning.calibration import load_calibration
            from echo2.simulation.calibrate import scenario_for

            if args.scenario and "=" not in args.scenario:
                raise ConfigError("give a scenario or --calibration (with --config and overrides), not both")
            overrides = ([args.scenario] if args.scenario else []) + args.overrides
            config = load_config(args.config, overrides)
            scenario = scenario_for(config, load_calibration(args.calibration), config.run.name or "calibrated")
        elif args.scenario:
            scenario = load_scenario(args.scenario, dotted_overrides(args.overrides))
        else:
            raise ConfigError("give a scenario YAML, or --calibration FILE to simulate a run config")
        result = simulate(scenario)
    except (ValueError, SimulationStalled) as error:
        print(f"echo2 simulate: {error}", file=sys.stderr)
        return 2
    out = write_run_dir(result, Path(args.out) if args.out else Path("runs") / f"sim-{scenario.name}")
    print("\n".join(result.lines()))
    print(f"wrote {out} (echo2 report {out})")
    return 0


def _report(args: argparse.Namespace) -> int:
    from echo2.report.html import write_report

    try:
        path = write_report(Path(args.run_dir), Path(args.out) if args.out else None)
    except FileNotFoundError as error:
        print(f"echo2 report: {error}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def _add_worker_flags(worker: argparse.ArgumentParser) -> None:
    """One flag per :class:`~echo2.rollout.options.WorkerOptions` field (help: the field's docstring).
    The parser has no defaults (``argparse.SUPPRESS``): what is not given comes from
    ``$ECHO2_WORKER_OPTIONS`` or the model's defaults."""
    from echo2.rollout.options import OPTIONS_ENV, TOKEN_ENV, WorkerOptions

    def flag(name: str, field: str, help: str | None = None, **kwargs) -> None:  # noqa: A002 - argparse's name
        info = WorkerOptions.model_fields[field]
        plain = info.is_required() or info.default in (None, "") or isinstance(info.default, bool)
        help = help or info.description.rstrip(".") + ("" if plain else f" (default: {info.default})")
        worker.add_argument(name, dest=field, help=help, **kwargs)

    flag("--coordinator", "coordinator", metavar="URL")
    token = worker.add_mutually_exclusive_group()
    token.add_argument("--token-file", metavar="PATH",
                       help=f"file holding the run token, readable by its owner only (echo2 train writes "
                            f"RUN_DIR/token); or set ${TOKEN_ENV}")
    token.add_argument("--token", help="the run token itself; visible to every user of this machine through ps, "
                                       "prefer --token-file or $" + TOKEN_ENV)
    flag("--name", "name")
    flag("--threads", "threads", type=int)
    flag("--device", "device")
    flag("--give-up-after", "give_up_after_s", type=float, metavar="SECONDS")
    flag("--relay-host", "relay_host")
    flag("--relay-port", "relay_port", type=int)
    flag("--advertise-host", "advertise_host")
    flag("--upload-mbps", "upload_mbps", type=float)
    flag("--latency-ms", "latency_ms", type=float)
    flag("--no-relay", "relay", action="store_false",
         help="do not serve chunks to peers (a worker nobody can reach, e.g. behind NAT)")
    flag("--price-per-hour", "price_per_hour", type=float)
    flag("--worker-class", "worker_class")
    flag("--throughput-factor", "throughput_factor", type=float)
    flag("--ca-file", "ca_file", metavar="PATH")
    flag("--pin-sha256", "pin_sha256", action="append", metavar="HEX",
         help="SHA-256 fingerprint of the certificate the https:// coordinator and relays must present, instead "
              "of a CA (self-signed setups; repeat for several)")
    flag("--relay-certfile", "relay_certfile", metavar="PATH")
    flag("--relay-keyfile", "relay_keyfile", metavar="PATH")
    worker.epilog = f"Options not given are taken from ${OPTIONS_ENV} (JSON) when set."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="echo2", description="RL post-training with remote rollout workers.")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="run a learner (hosting the coordinator) and local workers")
    train.add_argument("--config", help="YAML config file (see configs/)")
    train.add_argument("--resume", metavar="RUN_DIR",
                       help="continue a stopped or crashed run from its newest checkpoint (same version, data, buffer)")
    train.add_argument("--help-config", nargs="?", const="set", choices=("set", "all"),
                       help="list the config keys users set, with defaults (=all: every key) and exit")
    train.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. staleness=2 learner.lr=1e-4")
    train.set_defaults(handler=_train)

    serve = commands.add_parser(
        "serve", help="serve the Tinker API: clients' training loops train here, their sampling runs on the workers",
        description="echo2 as a Tinker-compatible training service (docs/tinker.md): prints TINKER_BASE_URL and "
                    "where the API key is; workers join with echo2 worker as to any run.")
    serve.add_argument("--config", help="YAML config file (model, workers, service.*)")
    serve.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. model.name=smollm2-135m-instruct; "
                       "or 'keys add NAME', 'keys revoke NAME', 'keys list': the service's API keys, one per user "
                       "(each user's sessions, clients and saves are its own)")
    serve.set_defaults(handler=_serve)

    worker = commands.add_parser(
        "worker", help="join a running training as a rollout worker", argument_default=argparse.SUPPRESS,
        description="Join a running training as a rollout worker. Give the run token with --token-file or "
                    "$ECHO2_TOKEN, not --token: a command line is visible to every user of the machine.")
    _add_worker_flags(worker)
    worker.set_defaults(handler=_worker)

    calibration = commands.add_parser(
        "calibrate", help="measure step time, worker speed and version costs on one short run",
        description="Train one short configuration and write what predictions need that nobody can declare "
                    "(docs/simulation.md): echo2 plan and echo2 simulate take it with --calibration.")
    calibration.add_argument("--config", help="run config to calibrate on (default: the defaults)")
    calibration.add_argument("--from-run", metavar="RUN_DIR", help="measure this finished run instead of training")
    calibration.add_argument("--out", help="calibration file to write (default RUN_DIR/calibration.yaml)")
    calibration.add_argument("--no-decode-curve", dest="decode_curve", action="store_false",
                             help="skip timing the engine's decoding steps against the batch (then predictions take "
                                  "every response at the mean, at the run's measured rate)")
    calibration.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. run.steps=40")
    calibration.set_defaults(handler=_calibrate)

    plan = commands.add_parser("plan", help="which workers to run for a config: cost, utilization, other S")
    inputs = plan.add_mutually_exclusive_group(required=True)
    inputs.add_argument("--inventory", help="worker inventory YAML (see configs/inventory.example.yaml)")
    inputs.add_argument("--calibration", help="echo2 calibrate's file: the config's own fleet, timed by it")
    inputs.add_argument("--scenario", help="a scenario YAML (echo2 simulate's): its fleet at the rate its leases "
                                           "drain at with its response lengths, and its centralized baseline")
    plan.add_argument("--config", help="run config (default: the defaults)")
    plan.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. staleness=2")
    plan.set_defaults(handler=_plan)

    evaluation = commands.add_parser("eval", help="held-out greedy accuracy of a checkpoint")
    evaluation.add_argument("checkpoint", help="checkpoint folder (RUN_DIR/checkpoints/step_N) or model path")
    evaluation.add_argument("--config", help="config whose task to use (default: the run's config.yaml)")
    evaluation.add_argument("--size", type=int, default=500, help="held-out prompts")
    evaluation.add_argument("--threads", type=int, default=2)
    evaluation.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    evaluation.set_defaults(handler=_eval)

    simulation = commands.add_parser("simulate", help="simulate a run past this machine (see configs/scenarios/)")
    simulation.add_argument("scenario", nargs="?", help="scenario YAML: model, learner, recipe, broadcast, fleet")
    simulation.add_argument("--calibration", help="simulate a run config instead, timed by echo2 calibrate's file "
                            "(overrides are then the config's)")
    simulation.add_argument("--config", help="with --calibration: the run config (default: the defaults)")
    simulation.add_argument("--out", help="run directory to write (default runs/sim-NAME)")
    simulation.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. recipe.staleness=2 "
                            "fleet.0.count=50")
    simulation.set_defaults(handler=_simulate)

    report = commands.add_parser("report", help="one self-contained HTML report of a real or simulated run")
    report.add_argument("run_dir", help="run directory (echo2 train or echo2 simulate output)")
    report.add_argument("--out", help="HTML file to write (default RUN_DIR/report.html)")
    report.set_defaults(handler=_report)

    from echo2.lab.cli import add_lab_parser

    add_lab_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s.%(msecs)03d %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("httpx", "uvicorn", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    parser = build_parser()
    args, leftover = parser.parse_known_args(argv)
    # argparse hands every positional to the first positional group, so overrides written after an
    # option (`echo2 eval CKPT --size 300 task.options.num_operands=4`) come back as leftovers.
    if leftover and hasattr(args, "overrides") and all("=" in item and not item.startswith("-") for item in leftover):
        args.overrides = [*args.overrides, *leftover]
    elif leftover:
        parser.error(f"unrecognized arguments: {' '.join(leftover)}")
    try:
        return args.handler(args)
    except ConfigError as error:
        print(f"echo2: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
