"""Why one source failed one request of a fetch, in words the fetch's log and errors carry, and
what the downloader (:mod:`echo2.broadcast.downloader`) does about it: move down the chain, skip the
source a while (``suspect``), or stop because the version will never come (``gone``)."""

from __future__ import annotations

import httpx

from echo2.broadcast.errors import error_body, error_code


class SourceFailed(Exception):
    def __init__(self, reason: str, gone: bool = False, suspect: bool = False, silent: bool = False) -> None:
        super().__init__(reason)
        self.gone = gone  # the source says the version will never come (evicted)
        self.suspect = suspect  # no answer, no bytes, a broken connection, bad bytes: skip it a while
        self.silent = silent  # it took the connection and then sent nothing: reported, for the coordinator to check


def refused(response: httpx.Response) -> SourceFailed:
    """A source's answer other than the bytes asked for."""
    code, detail = error_code(response), error_body(response).get("detail") or response.text[:200]
    return SourceFailed(f"{response.status_code} {code or 'error'}: {detail}", gone=code == "evicted")


def unreachable(error: httpx.TransportError, timeout: httpx.Timeout) -> SourceFailed:
    """A request that got no (whole) answer: no connection, no bytes within the read timeout, a reset."""
    if isinstance(error, httpx.ConnectTimeout):
        return SourceFailed(f"stalled: no connection within {timeout.connect:g}s", suspect=True)
    if isinstance(error, httpx.ReadTimeout):  # connected, then silent: the relay's doing, or a link cut meanwhile
        return SourceFailed(f"stalled: no bytes for {timeout.read:g}s ({type(error).__name__})", suspect=True,
                            silent=True)
    if isinstance(error, httpx.TimeoutException):
        return SourceFailed(f"stalled: no bytes for {timeout.read:g}s ({type(error).__name__})", suspect=True)
    return SourceFailed(f"{type(error).__name__}: {error or 'connection lost'}", suspect=True)


def below_floor(received: int, elapsed_s: float, floor_bytes_per_s: float) -> SourceFailed:
    """A relay that sent below its floor (:func:`echo2.core.fetch_chain.too_slow`); skipped and
    reported apart (:meth:`echo2.broadcast.suspects.SuspectSources.too_slow`), so not ``suspect``."""
    return SourceFailed(f"too slow: {received} bytes in {elapsed_s:.1f}s ({received / elapsed_s:.0f} B/s, its "
                        f"floor {floor_bytes_per_s:.0f} B/s)")
