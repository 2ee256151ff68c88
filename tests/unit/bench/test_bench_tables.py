"""The benchmarks' --quick variants run and write their table, results.json and plot."""

import subprocess
import sys

import pytest
from paths import REPO


def test_benchmark_tables_are_generated_from_their_results():
    """docs/benchmarks.md's tables are what bench/tables.py renders from docs/results/*.json, and
    every table names the commit and machine its figures came from."""
    result = subprocess.run([sys.executable, str(REPO / "bench" / "tables.py"), "--check"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    document = (REPO / "docs" / "benchmarks.md").read_text()
    tables = document.count("<!-- table: ")
    assert tables >= 10 and document.count("\n# commit ") == tables


def test_a_figure_quoted_in_prose_is_checked_against_its_results_file():
    """A number in the text carries a marker naming where it comes from: altered by hand, the
    check fails and a re-render writes the measured value back; a marker naming nothing is an error."""
    from tables import FIGURE, regenerate

    marked = [(doc, m) for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")]
              for m in FIGURE.finditer(doc.read_text())]
    assert len(marked) >= 20  # the quoted figures of the documents are generated, not typed
    doc, match = marked[0]
    text = doc.read_text()
    assert regenerate(text) == text  # main as committed
    value = match.group("value")
    altered = text[:match.start()] + ("8" if value[0] != "8" else "9") + value[1:] + text[match.start("marker"):]
    assert regenerate(altered) != altered and regenerate(altered) == text
    with pytest.raises(SystemExit, match="not in docs/results/attacks.json"):
        regenerate("1.0<!-- fig: attacks rows[kind=nobody].steps .1f -->")


def test_a_measurement_quoted_without_a_marker_is_found_and_a_setting_in_code_is_not():
    from tables import unmarked

    text = ("S = 2 took 0.41x the sync time at 512 samples/s,\nwithin `2 points` (the 95% interval; goal: at most "
            "`0.5x`),\n1.13<!-- fig: attacks rows[kind=hoarder].run_s_per_step_vs_clean .2f -->x with a hoarder.\n"
            "```\n0.99x in a fenced block\n```\n")
    assert unmarked(text) == [(1, "0.41x"), (1, "512 samples/s")]


def test_a_table_says_whether_its_code_is_still_current():
    """The provenance line of a table tells figures measured on today's package and benches from
    figures measured on older or uncommitted code."""
    from common import git
    from tables import bench_code, bench_script, code_status

    # a bench's code: the package, its script and the bench modules it imports (recursively)
    assert bench_code(bench_script("simulator")) == ["src", "bench/common.py", "bench/heldout.py", "bench/simulator.py"]
    assert bench_script("objectives-long").name == "objectives.py" and bench_script("real-model").name == "real_model.py"
    head = git("rev-parse", "HEAD")
    if not head:
        pytest.skip("not a git checkout")
    code = bench_code(bench_script("capacity"))
    edited = git("diff", "--name-only", "HEAD", "--", *code)  # uncommitted edits count: the tables say what a commit will
    assert code_status(head, code) == ("current code" if not edited else f"code changed since ({len(edited.splitlines())} files)")
    assert code_status(head + "+dirty", code) == "uncommitted code"
    assert code_status("0" * 40, code) == "commit not in this history"
    assert code_status(None, code) == "code unknown"
    first_change = git("log", "--format=%H", "--diff-filter=A", "--", "src/echo2/planning/calibration.py").splitlines()
    if first_change:  # a shallow clone may not hold it
        assert code_status(first_change[-1], code).startswith("code changed since (")


def test_held_out_calibration_is_pooled_over_its_runs():
    """The held-out benches' calibration is the mean of the calibration configuration's runs, figure
    by figure and learner step by learner step, so one run in a fast phase of the machine does not
    shift every prediction after it."""
    from heldout import POOLED, pooled

    from echo2.planning.calibration import Calibration

    base = dict(model="m", model_sha256="0" * 16, machine="x", protocol="async", train_step_cv=0.1,
                throughput_cv=0.1, lease_overhead_s=0.05, fetch_s=0.02, dissemination_s=0.2, full_bytes=2e6)
    fast = Calibration(source="a", train_step_s=0.6, step_seconds=[0.7, 0.5], rollouts_per_s=1000.0, **base)
    slow = Calibration(source="b", train_step_s=0.8, step_seconds=[0.9, 0.7], rollouts_per_s=800.0, **base)
    both = pooled([fast, slow])
    assert both.train_step_s == pytest.approx(0.7) and both.rollouts_per_s == pytest.approx(900.0)
    assert both.step_seconds == pytest.approx([0.8, 0.6]) and both.source == "a, b"
    assert both.full_bytes == 2e6 and pooled([fast]) is fast
    assert set(POOLED) <= set(Calibration.model_fields)


def test_held_out_calibration_runs_at_the_start_and_halfway_through_every_round(monkeypatch, tmp_path):
    """The calibration configuration is trained CALIBRATIONS_PER_ROUND times a round, spread through
    it, each run under its own name, so that the pooled calibration samples the machine across the
    bench rather than twice at the start of a round."""
    import heldout

    trained: list[tuple[str, int]] = []

    def fake_run(overrides, steps, out, name):
        trained.append((name, steps))
        return tmp_path / heldout.slug(name)

    monkeypatch.setattr(heldout, "run", fake_run)
    configs = [(f"c{i}", "learner", [f"staleness={i}"]) for i in range(5)]
    calibrations, dirs = heldout.run_all(configs, 10, tmp_path, repeats=2)
    calibration = heldout.CALIBRATION[0]
    assert [name for name, _ in trained] == [
        calibration, "c0", "c1", "c2", f"{calibration} (run 2)", "c3", "c4",
        f"{calibration} (run 3)", "c0 (run 2)", "c1 (run 2)", "c2 (run 2)",
        f"{calibration} (run 4)", "c3 (run 2)", "c4 (run 2)"]
    assert len(calibrations) == len(set(calibrations)) == 2 * heldout.CALIBRATIONS_PER_ROUND
    assert all(steps == 20 for name, steps in trained if name.startswith(calibration))
    assert [len(d) for d in dirs.values()] == [2] * 5
