"""Real runs across lab hosts: a worker behind NAT joins, fetches and submits, and the coordinator
sends nobody to an address its relay cannot be reached at."""

from __future__ import annotations

import re

from lab_support import open_lab

from echo2.lab import HostSpec
from echo2.lab.rehearsal import LabRun

#: A short run of the shipped tiny model (long enough for the relay checks to give their verdicts,
#: ~8 s of tries for an unreachable relay, and for a second worker to join after the first has
#: submitted), small steps, no evaluation but the first and last.
SHORT = ["run.steps=100", "eval.every=1000", "eval.size=20", "eval.show=0", "learner.groups_per_step=4",
         "rollout.groups_per_lease=2", "telemetry.tensorboard=false", "checkpoint.every=0"]


def test_a_worker_behind_nat_joins_fetches_and_submits_as_a_leaf(tmp_path):
    lab = open_lab([HostSpec("learner"), HostSpec("pub", 50), HostSpec("nat", 50, nat=True)])
    with lab:
        run = LabRun(lab, "learner", tmp_path / "run", [*SHORT, "run.steps=100"])  # time for the second to join
        with run:
            # the NAT'd worker first, alone until it has submitted: started together, the public one (its
            # relay the NAT'd one's source) held each new version first and could take every slot the
            # window opened, leaving the NAT'd one refreshing all run long (a CI run's log showed that)
            run.worker("nat", "nat")
            run.wait_for_worker_line("nat", r"groups accepted", 120)  # it leased and submitted (all outbound)
            run.worker("pub", "pub")
            assert run.wait(300) == 0, run.logs
    log = (tmp_path / "run" / "train.log").read_text()
    # the NAT'd worker advertised its private address: checked from the learner's host, refused
    assert re.search(r"relay of nat at http://192\.168\.3\.2:\d+ is unreachable", log), log
    assert re.search(r"relay of pub at http://10\.77\.2\.2:\d+ answered", log), log
    nat = run.worker_log("nat")
    assert re.search(r"v\d+: \d+ chunks in", nat), nat  # it fetched versions
    assert "192.168.3.2" not in run.worker_log("pub")  # nobody was sent to the private address
