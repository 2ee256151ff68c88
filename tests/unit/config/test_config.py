"""Config loading: overrides, one-line errors naming the key, resolved staleness."""

import subprocess
import sys

import pytest
from paths import REPO

from echo2.config import ConfigError, dump_config, load_config


def test_defaults_resolve_staleness():
    assert load_config().staleness == 1
    assert load_config(overrides=["protocol=sync"]).staleness == 0
    assert load_config(overrides=["protocol=pull", "staleness=3"]).staleness == 3


def test_overrides_are_typed():
    config = load_config(overrides=["learner.lr=3e-4", "workers.count=3", "telemetry.tensorboard=false"])
    assert config.learner.lr == 3e-4 and config.workers.count == 3 and config.telemetry.tensorboard is False


def test_unknown_key_names_the_key():
    with pytest.raises(ConfigError, match=r"^config key 'learner.lrr': unknown key$"):
        load_config(overrides=["learner.lrr=1"])


def test_ill_typed_value_names_the_key():
    with pytest.raises(ConfigError, match=r"config key 'rollout.group_size'"):
        load_config(overrides=["rollout.group_size=many"])


def test_sync_with_staleness_is_refused():
    with pytest.raises(ConfigError, match="protocol=sync"):
        load_config(overrides=["protocol=sync", "staleness=2"])


def test_yaml_file_and_round_trip(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("protocol: pull\nlearner:\n  groups_per_step: 8\n")
    config = load_config(path)
    assert config.protocol == "pull" and config.learner.groups_per_step == 8
    again = tmp_path / "again.yaml"
    again.write_text(dump_config(config))
    assert load_config(again) == config


def test_bad_yaml_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("learner: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_shipped_recipe_is_the_defaults():

    recipe = load_config(REPO / "configs" / "default.yaml")
    defaults = load_config()
    assert recipe.model_dump(exclude={"task"}) == defaults.model_dump(exclude={"task"})
    assert recipe.task.name == defaults.task.name


def test_list_items_are_overridden_by_index():
    config = load_config(overrides=["emulation.fleet=[{price_per_hour: 1}, {}]", "emulation.fleet.1.price_per_hour=2.5"])
    assert [spec.price_per_hour for spec in config.emulation.fleet] == [1.0, 2.5]
    with pytest.raises(ConfigError, match=r"config key 'emulation.fleet.5.price_per_hour': '5' is not an index"):
        load_config(overrides=["emulation.fleet=[{}]", "emulation.fleet.5.price_per_hour=1"])


def test_config_package_imports_no_torch():
    code = ("import sys, echo2.config; "
            "assert not {'torch', 'transformers'} & set(sys.modules), 'echo2.config imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_colocated_baseline_is_one_worker_on_the_learners_cpus_under_sync_and_says_what_it_needs():
    config = load_config(overrides=["emulation.colocated=true", "protocol=sync", "learner.threads=2"])
    assert (config.workers.count, config.workers.threads, config.staleness) == (1, 2, 0)
    with pytest.raises(ConfigError, match=r"emulation.colocated needs protocol: sync \(S = 0\), not async S=1$"):
        load_config(overrides=["emulation.colocated=true"])
    with pytest.raises(ConfigError, match="needs workers.count: 1; no emulation.worker_upload_mbps"):
        load_config(overrides=["emulation.colocated=true", "protocol=sync", "workers.count=3", "emulation.worker_upload_mbps=5"])


def test_keys_that_moved_still_load_under_their_new_names_with_a_warning(tmp_path, caplog):
    """The one-machine emulation went to ``emulation:``, the defence tuning to ``limits:``; a config
    written before (a run directory's, which --resume reads) keeps loading."""
    old = tmp_path / "old.yaml"
    old.write_text("workers:\n  count: 3\n  upload_mbps: 8\n  fleet: [{price_per_hour: 1.5}]\n"
                   "broadcast:\n  learner_upload_mbps: 4\ncoordinator:\n  body_timeout_s: 30\n")
    with caplog.at_level("WARNING", logger="echo2"):
        config = load_config(old, ["coordinator.registrations_burst=7", "workers.fleet.0.price_per_hour=2"])
    assert config.workers.count == 3 and config.emulation.worker_upload_mbps == 8
    assert config.emulation.learner_upload_mbps == 4 and config.limits.body_timeout_s == 30
    assert config.limits.registrations_burst == 7 and config.emulation.fleet[0].price_per_hour == 2
    assert "config key workers.upload_mbps" in caplog.text and "is now emulation.worker_upload_mbps" in caplog.text
    assert "upload_mbps" not in dump_config(config).split("emulation:")[0]  # written back under the new names only
    both = tmp_path / "both.yaml"
    both.write_text("workers:\n  upload_mbps: 8\nemulation:\n  worker_upload_mbps: 4\n")
    with pytest.raises(ConfigError, match="workers.upload_mbps' and 'emulation.worker_upload_mbps'.*keep one"):
        load_config(both)
