"""Workers are built from one typed ``WorkerOptions``: ``echo2 worker``'s flags and ``echo2 train``'s
config give the same object, and the run token stays off command lines, reprs and dumps."""

import os
import pickle
import subprocess
import sys

import pytest

from echo2.cli import build_parser, worker_options
from echo2.config import ConfigError, load_config
from echo2.launch.train import LOCAL_GIVE_UP_S, local_worker_options
from echo2.rollout.options import OPTIONS_ENV, TOKEN_ENV, WorkerOptions

URL, TOKEN = "http://127.0.0.1:9", "f00dfeedc0ffee0123456789abcdef42"


def _cli(*flags: str, environ: dict | None = None) -> WorkerOptions:
    return worker_options(build_parser().parse_args(["worker", *flags]), environ={} if environ is None else environ)


def _private_file(path, text: str, mode: int = 0o600):
    path.write_text(text)
    path.chmod(mode)
    return path


def test_options_from_flags_equal_options_from_the_config(tmp_path):
    config = load_config(overrides=[
        "workers.count=3", "workers.threads=2", "workers.device=cuda:1", "workers.relay=false",
        "emulation.worker_upload_mbps=40",
        "emulation.fleet=[{price_per_hour: 1.5, throughput_factor: 0.5, worker_class: slow, latency_ms: 20, "
        "upload_mbps: 8}, {price_per_hour: 0.2}]"])
    slow, cheap, slow_again = local_worker_options(config, URL, TOKEN)
    token_file = _private_file(tmp_path / "token", TOKEN + "\n")
    # a local worker dies with its learner: it gives up where a worker started by hand retries for ever
    common = ["--coordinator", URL, "--token-file", str(token_file), "--threads", "2", "--device", "cuda:1",
              "--no-relay", "--give-up-after", str(LOCAL_GIVE_UP_S)]
    assert slow == _cli(*common, "--name", "local-0", "--price-per-hour", "1.5", "--throughput-factor", "0.5",
                        "--worker-class", "slow", "--latency-ms", "20", "--upload-mbps", "8")
    assert cheap == _cli(*common, "--name", "local-1", "--price-per-hour", "0.2", "--upload-mbps", "40")
    assert slow_again == slow.model_copy(update={"name": "local-2"})  # the fleet is cycled
    assert slow.run_token() == TOKEN


def test_environment_options_with_flags_over_them():
    options = local_worker_options(load_config(overrides=["workers.count=1", "emulation.worker_upload_mbps=40"]), URL, TOKEN)[0]
    environ = {OPTIONS_ENV: options.secret_json(), TOKEN_ENV: "another-token"}
    assert _cli("--name", "local-0", environ=environ) == options  # what a local worker gets
    assert _cli("--threads", "3", environ=environ) == options.model_copy(update={"threads": 3})


def test_token_sources_and_precedence(tmp_path, capsys):
    assert _cli("--coordinator", URL, environ={TOKEN_ENV: TOKEN}).run_token() == TOKEN
    assert capsys.readouterr().err == ""
    assert _cli("--coordinator", URL, "--token", "by-hand", environ={TOKEN_ENV: TOKEN}).run_token() == "by-hand"
    warning = capsys.readouterr().err.strip()
    assert "--token is visible to every user" in warning and "--token-file" in warning
    assert len(warning.splitlines()) == 1
    token_file = _private_file(tmp_path / "token", "from-file\n")
    assert _cli("--coordinator", URL, "--token-file", str(token_file), environ={TOKEN_ENV: TOKEN}).run_token() \
        == "from-file"
    with pytest.raises(ConfigError, match="no run token.*--token-file.*ECHO2_TOKEN"):
        _cli("--coordinator", URL)
    with pytest.raises(ConfigError, match="no coordinator"):
        _cli(environ={TOKEN_ENV: TOKEN})
    with pytest.raises(ConfigError, match="throughput_factor"):
        _cli("--coordinator", URL, "--throughput-factor", "1.5", environ={TOKEN_ENV: TOKEN})


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604], ids=oct)
def test_token_file_readable_by_others_is_refused(tmp_path, mode):
    token_file = _private_file(tmp_path / "token", TOKEN, mode)
    with pytest.raises(ConfigError, match=rf"accessible to other users \(mode {mode:o}\).*chmod 600"):
        _cli("--coordinator", URL, "--token-file", str(token_file))
    with pytest.raises(ConfigError, match="empty"):
        _cli("--coordinator", URL, "--token-file", str(_private_file(tmp_path / "empty", "\n")))


def test_token_file_refused_by_the_command(tmp_path):
    token_file = _private_file(tmp_path / "token", TOKEN, 0o644)
    result = subprocess.run([sys.executable, "-m", "echo2.cli", "worker", "--coordinator", URL, "--token-file",
                             str(token_file)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "chmod 600" in result.stderr and TOKEN not in result.stderr


def test_token_is_secret_unless_revealed():
    options = WorkerOptions(coordinator=URL, token=TOKEN, name="w")
    for shown in (repr(options), str(options), options.model_dump_json(), str(options.model_dump()),
                  options.model_dump_json(include={"token"})):
        assert TOKEN not in shown
    assert "token" not in options.model_dump()
    assert options.run_token() == TOKEN and TOKEN in options.secret_json()
    assert WorkerOptions.from_secret_json(options.secret_json()) == options
    copied = pickle.loads(pickle.dumps(options))  # how a Ray actor receives it
    assert copied == options and copied.run_token() == TOKEN
    assert copied.model_copy(update={"relay_host": "0.0.0.0"}).run_token() == TOKEN


def test_options_module_does_not_import_torch():
    code = ("import sys, echo2.rollout.options, echo2.cli; echo2.cli.build_parser(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_train_writes_an_owner_only_token_file(tmp_path):
    from echo2.launch.train import _write_private

    _write_private(tmp_path / "token", TOKEN + "\n")
    assert os.stat(tmp_path / "token").st_mode & 0o777 == 0o600
    assert _cli("--coordinator", URL, "--token-file", str(tmp_path / "token")).run_token() == TOKEN
