"""The lab's calls into the kernel's tools (``ip``, ``tc``, ``nft``), and what it needs to run.

Every call has a timeout and a failure names the command and what the tool said: a lab that
half-builds is torn down by its caller, so an error here must say which step failed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

#: Every namespace a lab makes starts with this (``echo2 lab clean`` removes what is left of any).
PREFIX = "e2lab-"
TIMEOUT_S = 20.0


class LabUnavailable(RuntimeError):
    """This machine cannot build a lab; the message names what is missing, in one line."""


class LabError(RuntimeError):
    """A command building or changing a lab failed."""


def run(*argv: str, check: bool = True) -> str:
    """Run one tool command; its stdout, or :class:`LabError` naming it and its stderr."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise LabError(f"{' '.join(argv)}: no answer in {TIMEOUT_S:.0f}s") from None
    if check and done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def in_ns(namespace: str, *argv: str, check: bool = True) -> str:
    """Run a command inside ``namespace``."""
    return run("ip", "netns", "exec", namespace, *argv, check=check)


def nft(namespace: str, script: str) -> None:
    """Load an nftables ruleset into ``namespace`` (one transaction: all of it or nothing)."""
    try:
        done = subprocess.run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=script, text=True,
                              capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise LabError(f"nft in {namespace}: no answer in {TIMEOUT_S:.0f}s") from None
    if done.returncode != 0:
        raise LabError(f"nft in {namespace}: {done.stderr.strip()}")


def namespaces(prefix: str = PREFIX) -> list[str]:
    """The named network namespaces starting with ``prefix``."""
    listed = run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]


def remove(prefix: str) -> list[str]:
    """Remove every namespace starting with ``prefix``: first kill what runs in them (a process
    keeps its namespace, and the links in it, alive), then the namespaces. Returns their names."""
    found = namespaces(prefix)
    for namespace in found:
        for pid in run("ip", "netns", "pids", namespace, check=False).split():
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError):
                pass
    for namespace in found:
        run("ip", "netns", "del", namespace, check=False)
    return found


def require(nat: bool) -> None:
    """Raise :class:`LabUnavailable` unless this machine can build a lab (with NAT hosts: ``nat``)."""
    if os.name != "posix" or not os.path.exists("/proc/self/ns/net"):
        raise LabUnavailable("the network lab needs Linux network namespaces")
    if os.geteuid() != 0:
        raise LabUnavailable("the network lab needs root (network namespaces, veth links, tc)")
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2")) + ((("nft", "nftables"),) if nat else ()):
        if shutil.which(tool) is None:
            raise LabUnavailable(f"the network lab needs the {tool!r} command (Debian: apt-get install {package})")
    probe = f"{PREFIX}probe-{uuid.uuid4().hex[:6]}"
    try:
        run("ip", "netns", "add", probe)
    except LabError as error:
        raise LabUnavailable(f"cannot create a network namespace here: {error}") from None
    try:
        in_ns(probe, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit", "burst", "16kb",
              "latency", "50ms")
    except LabError as error:
        raise LabUnavailable(f"the kernel's tbf queue discipline is missing (tc: {error})") from None
    finally:
        run("ip", "netns", "del", probe, check=False)
