"""A training service (``echo2 serve``) on a thread of the test process, for the tests that use it."""

import asyncio
import json
import threading
import time
from pathlib import Path

import httpx
import tinker
from waiting import wait_for

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


class LosingProxy:
    """A TCP proxy in front of a service that loses the answer to the first ``times`` requests to
    ``path``: it forwards each such request, lets the service answer, then closes the client's
    connection without passing the answer on — a reply lost on the network, after the work was done."""

    def __init__(self, target_url: str, path: str, times: int = 1) -> None:
        self.target = httpx.URL(target_url)
        self.marker, self.left = f"POST {path} ".encode(), times
        self.requests = self.lost = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "the proxy did not start"
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _connection(self, client_reader, client_writer) -> None:
        server_reader, server_writer = await asyncio.open_connection(self.target.host, self.target.port)
        doomed = asyncio.Event()

        async def upstream() -> None:
            while data := await client_reader.read(1 << 16):
                if self.marker in data:
                    self.requests += 1
                    if self.left > 0:
                        self.left -= 1
                        doomed.set()
                server_writer.write(data)
                await server_writer.drain()

        async def downstream() -> None:
            while data := await server_reader.read(1 << 16):
                if doomed.is_set():  # the service answered: the client never hears it
                    self.lost += 1
                    break
                client_writer.write(data)
                await client_writer.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for writer in (client_writer, server_writer):
            writer.close()

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            connections = asyncio.all_tasks() - {asyncio.current_task()}
            for task in connections:
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
