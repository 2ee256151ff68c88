"""Workers are built from one typed ``WorkerOptions``: ``echo2 worker``'s flags and ``echo2 train``'s
config give the same object, and the run token stays off command lines, reprs and dumps."""



from echo2.config import load_config
from echo2.launch.local import LocalWorkers
from echo2.launch.train import local_worker_options
from echo2.rollout.options import OPTIONS_ENV

URL, TOKEN = "http://127.0.0.1:9", "f00dfeedc0ffee0123456789abcdef42"


def test_local_worker_has_no_token_on_its_command_line(tmp_path):
    config = load_config(overrides=["workers.count=1", "workers.relay=false"])
    options = [o.model_copy(update={"give_up_after_s": 2.0}) for o in local_worker_options(config, URL, TOKEN)]
    workers = LocalWorkers(options, tmp_path)
    workers.start()
    try:
        (process,) = workers.processes
        cmdline = open(f"/proc/{process.pid}/cmdline", "rb").read().decode().split("\0")
        assert TOKEN not in " ".join(cmdline) and "--token" not in " ".join(cmdline)
        assert cmdline[-4:-1] == ["worker", "--name", "local-0"]
        # the options travel in the environment, readable by its owner only
        assert f"{OPTIONS_ENV}=".encode() in open(f"/proc/{process.pid}/environ", "rb").read()
        assert process.wait(timeout=120) == 1  # it gave up on the (nonexistent) coordinator of its options
    finally:
        workers.stop(timeout_s=1)
    text = (tmp_path / "local-0.log").read_text()
    assert f"cannot reach the coordinator at {URL}" in text and "gave up after" in text
    assert TOKEN not in text
