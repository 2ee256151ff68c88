"""``echo2 report``: one self-contained HTML file with embedded figures and the reliability table."""


import pytest
from report_support import images, real_run_dir

from echo2.report.data import load_run
from echo2.report.html import SECTIONS, render


def test_missing_pieces_are_reported_not_guessed(tmp_path):
    run = real_run_dir(tmp_path / "run")
    (run / "reliability.json").unlink()
    (run / "timeline.jsonl").unlink()
    page = render(load_run(run))
    assert "no reliability.json in this run directory" in page
    assert len(images(page)) == len(SECTIONS) - 2  # dissemination falls back to the per-step metrics
    assert "no timeline recorded" in page  # the timeline alone has nothing to draw
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        load_run(tmp_path)


def test_a_poisoned_run_directory_still_renders(tmp_path):
    """A worker once put an infinite time into the timeline and ``Infinity`` into metrics.jsonl:
    the report crashed on that run for good. Non-finite numbers, garbage lines and intervals that
    end before they start are left out; the rest still renders."""
    run = real_run_dir(tmp_path / "run")
    with (run / "timeline.jsonl").open("a") as timeline:
        timeline.write('{"who": "evil", "kind": "generate", "start": 1800000001.0, "end": Infinity, "version": 1}\n')
        timeline.write('{"who": "evil", "kind": "generate", "start": NaN, "end": 1.0, "version": 1}\n')
        timeline.write('{"who": "evil", "kind": "fetch", "start": 1800000009.0, "end": 1800000001.0, "version": 1}\n')
        timeline.write('[1, 2, 3]\n')
    with (run / "metrics.jsonl").open("a") as metrics:
        metrics.write('{"step": 13, "time": 1800000013.0, "reward_mean": NaN, "utilization": Infinity}\n')
    data = load_run(run)
    assert all(i["who"] != "evil" for i in data.timeline)
    assert data.records[-1] == {"step": 13, "time": 1800000013.0}
    assert len(images(render(data))) == len(SECTIONS) - 1
