"""A training service (``echo2 serve``) on a thread of the test process, for the tests that use it."""

import json
import threading
import time
from pathlib import Path

import httpx
import tinker
from conftest import wait_for

from echo2.config import load_config
from echo2.launch.serve import API_KEY_FILE, run_service


class Served:
    """A service running on its own thread, its address, key and folder."""

    def __init__(self, folder: Path, *overrides: str) -> None:
        self.folder, self.stop = folder, threading.Event()
        config = load_config(None, [f"service.dir={folder}", "service.max_tokens=16", "service.poll_s=5", "service.turn_timeout_s=30",
                                    *overrides])
        address, started = folder / "coordinator.json", time.time()
        self.thread = threading.Thread(target=run_service, args=(config, self.stop), daemon=True)
        self.thread.start()
        wait_for(lambda: address.exists() and address.stat().st_mtime >= started, timeout_s=60,
                 what="the service to start")
        self.url = json.loads((folder / "coordinator.json").read_text())["url"]
        self.key = (folder / API_KEY_FILE).read_text().strip()
        self.token = (folder / "token").read_text().strip()

    def client(self) -> tinker.ServiceClient:
        return tinker.ServiceClient(base_url=self.url, api_key=self.key)

    def dashboard(self) -> dict:
        return httpx.get(f"{self.url}/v1/dashboard", headers={"X-Echo2-Token": self.token}, timeout=10).json()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
