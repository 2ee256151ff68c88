"""Real runs across lab hosts: a worker behind NAT joins, fetches and submits, and the coordinator
sends nobody to an address its relay cannot be reached at."""

from __future__ import annotations

import re

import pytest
from lab_support import open_lab

from echo2.lab import HostSpec
from echo2.lab.rehearsal import LabRun

#: A short run of the shipped tiny model (long enough for the relay checks to give their verdicts:
#: ~8 s of tries for an unreachable relay), small steps, no evaluation but the first and last.
SHORT = ["run.steps=60", "eval.every=1000", "eval.size=20", "eval.show=0", "learner.groups_per_step=4",
         "rollout.groups_per_lease=2", "telemetry.tensorboard=false", "checkpoint.every=0"]


@pytest.mark.slow
def test_a_worker_behind_nat_joins_fetches_and_submits_as_a_leaf(tmp_path):
    lab = open_lab([HostSpec("learner"), HostSpec("pub", 50), HostSpec("nat", 50, nat=True)])
    with lab:
        # a quarter of the 8-slot window each: the public worker, first with weights, holds one lease
        # at a time and cannot keep the window full by itself before the NAT'd one has its weights
        run = LabRun(lab, "learner", tmp_path / "run", [*SHORT, "coordinator.window_share=0.25"])
        with run:
            run.worker("pub", "pub")
            run.worker("nat", "nat")
            assert run.wait(300) == 0, run.logs
    log = (tmp_path / "run" / "train.log").read_text()
    # the NAT'd worker advertised its private address: checked from the learner's host, refused
    assert re.search(r"relay of nat at http://192\.168\.3\.2:\d+ is unreachable", log), log
    assert re.search(r"relay of pub at http://10\.77\.2\.2:\d+ answered", log), log
    nat = run.worker_log("nat")
    assert re.search(r"groups accepted", nat), nat  # it leased and submitted (every connection outbound)
    assert re.search(r"v\d+: \d+ chunks in", nat), nat  # and fetched versions
    assert "192.168.3.2" not in run.worker_log("pub")  # nobody was sent to the private address
