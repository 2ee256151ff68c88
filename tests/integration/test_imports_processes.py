"""Imports flow one way: the decision cores need nothing else; planning, simulation and reports need neither torch nor the coordinator;
the coordinator needs nothing of the learner or the workers, and the learner reaches the
coordinator only through ``echo2.exchange``. Each check runs in a fresh interpreter."""

import inspect
import json
import re
import subprocess
import sys

import pytest
from paths import REPO, SOURCE


def modules_loaded_by(code: str) -> set[str]:
    """Names in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def import_package(package: str) -> str:
    """Code importing every module of ``echo2.<package>``."""
    names = sorted(f"echo2.{package}.{p.stem}" for p in (SOURCE / package).glob("*.py") if p.stem != "__init__")
    return "\n".join(f"import {name}" for name in names)


def prefixed(loaded: set[str], *prefixes: str) -> list[str]:
    return sorted(m for m in loaded if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_plan_simulate_and_report_commands_run_without_torch(tmp_path):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(json.dumps({
        "name": "tiny", "model": {"name": "m", "parameters_b": 0.005, "payload_gb": 0.01},
        "learner": {"train_step_s": 1.0},
        "recipe": {"run": {"steps": 5}, "learner": {"groups_per_step": 4},
                   "rollout": {"group_size": 4, "groups_per_lease": 4}},
        "fleet": [{"name": "w", "count": 2, "rollouts_per_s": 100.0}]}))
    run_dir = tmp_path / "sim"
    loaded = modules_loaded_by(
        "from echo2.cli import main\n"
        f"assert main(['plan', '--inventory', 'configs/inventory.example.yaml']) == 0\n"
        f"assert main(['simulate', {str(scenario)!r}, '--out', {str(run_dir)!r}]) == 0\n"
        f"assert main(['report', {str(run_dir)!r}]) == 0")
    assert (run_dir / "report.html").is_file()
    assert prefixed(loaded, "torch", "transformers", "echo2.coordinator") == []


def test_the_learner_reaches_the_coordinator_only_through_the_exchange_module():
    loaded = modules_loaded_by(import_package("learner") + "\nimport echo2.model.evaluation")
    assert prefixed(loaded, "echo2.coordinator", "echo2.rollout", "echo2.simulation") == []


def test_the_learners_face_of_the_coordinator_has_the_coordinators_own_signatures():
    """``exchange.RolloutSource`` is what the learner may call: each method as the coordinator takes it."""
    from echo2.coordinator.state import CoordinatorState
    from echo2.exchange import RolloutSource

    methods = [name for name in vars(RolloutSource) if not name.startswith("_")]
    assert "publish" in methods and len(methods) <= 5
    for name in methods:
        face, real = (inspect.signature(getattr(cls, name)) for cls in (RolloutSource, CoordinatorState))
        assert list(face.parameters) == list(real.parameters), name


@pytest.mark.parametrize("package", ["planning", "simulation", "report"])
def test_planning_simulation_and_reports_import_neither_torch_nor_the_coordinator(package):
    loaded = modules_loaded_by(import_package(package))
    assert prefixed(loaded, "torch", "transformers", "echo2.coordinator", "echo2.learner") == []


def test_the_decision_cores_import_nothing_of_echo2_outside_them_and_no_torch():
    """Pure rules (no threads, no I/O, no clock): what the live roles and the simulator share."""
    loaded = modules_loaded_by(import_package("core"))
    assert [m for m in prefixed(loaded, "echo2") if m != "echo2" and not m.startswith("echo2.core")] == []
    assert prefixed(loaded, "torch", "httpx", "numpy") == []
    clocks = {p.name for p in (SOURCE / "core").glob("*.py")
              if re.search(r"^\s*(import|from) (time|threading|socket|asyncio|random)\b", p.read_text(), re.M)}
    assert clocks == set()  # time is passed in; nothing waits, sleeps or draws at random


def test_tasks_are_loaded_by_name_and_the_exchange_loads_none():
    loaded = modules_loaded_by("import echo2.exchange, echo2.tasks\nfrom echo2.tasks import load_task\n"
                               "load_task('arithmetic')")
    assert prefixed(loaded, "echo2.tasks") == ["echo2.tasks", "echo2.tasks.arithmetic", "echo2.tasks.base"]
    assert prefixed(loaded, "echo2.tasks.tools") == []  # the calculator's sandbox: only with the calculator task


def test_the_coordinator_imports_nothing_of_the_learner_or_the_workers():
    loaded = modules_loaded_by(import_package("coordinator"))
    assert prefixed(loaded, "echo2.learner", "echo2.rollout", "echo2.launch", "torch") == []


def test_workers_import_nothing_of_the_learner_or_the_coordinator():
    loaded = modules_loaded_by(import_package("rollout"))
    assert prefixed(loaded, "echo2.learner", "echo2.coordinator", "echo2.simulation") == []

