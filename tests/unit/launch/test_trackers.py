"""Weights & Biases and trackio get what TensorBoard gets: one short real run with both on, offline,
read back from the files each tracker keeps in the run directory."""

import re
import sys

import pytest

from echo2.config import load_config
from echo2.telemetry.trackers import open_trackers


@pytest.mark.parametrize("tracker", ["wandb", "trackio"])
def test_a_tracker_turned_on_but_not_installed_names_the_extra_to_install(tmp_path, monkeypatch, tracker):
    monkeypatch.setitem(sys.modules, tracker, None)  # what an uninstalled package imports as
    config = load_config(overrides=[f"telemetry.{tracker}=true"])
    with pytest.raises(ImportError, match=re.escape(f"pip install 'echo2[{tracker}]'")):
        open_trackers(config, tmp_path)
