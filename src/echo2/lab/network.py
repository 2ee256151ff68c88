"""A network of hosts on one Linux box: one network namespace per host, links shaped by the
kernel, NAT, and partitions that drop packets silently or refuse them.

Layout: a ``core`` namespace routes between hosts. Host *i* hangs off it on its own link
``10.77.i.0/24`` (the core at ``.1``). A public host holds ``10.77.i.2`` itself; a host behind NAT
sits behind a router namespace that holds ``10.77.i.2`` and masquerades the host's private
network ``192.168.i.0/24``, so the host can connect out and nothing can connect in (nftables
drops every new inbound flow). Each host's link is shaped by ``tbf`` on both ends: what the host
sends leaves through its uplink's queue, what it receives through its downlink's.

Partitions are routing rules in the core: ``blackhole`` drops a host's packets (or those between
two hosts) without a word, as a NAT that timed out or a cloud firewall does; ``reject`` answers
them with an ICMP refusal, as a reachable router without a route does. Healing deletes the rules.

What is real here: the kernel's TCP, its queues and bandwidth limits, routing, NAT and silent
loss. What is not: propagation delay (the kernel here has no ``netem``), and every host shares
this machine's CPUs. See docs/wan.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from echo2.lab.commands import PREFIX, in_ns, nft, remove, require, run
from echo2.lab.hosts import HostSpec

#: Partition rules take routing-rule preferences from here up to the kernel's own (0, 32766, 32767).
PARTITION_PREFERENCE, KERNEL_PREFERENCE = 1000, 32766
#: How long a shaped queue may hold a packet before tbf drops it (its buffer, in time).
QUEUE_LATENCY = "100ms"
#: The ruleset of a NAT router: masquerade what leaves by ``wan``; forward what the host started,
#: and the replies to it, and nothing else (a new connection from outside is dropped).
NAT_RULES = """table ip lab {
  chain postrouting { type nat hook postrouting priority srcnat; oifname "wan" masquerade; }
  chain forward { type filter hook forward priority filter; policy drop;
    iifname "lan" accept; ct state established,related accept; }
}
"""


class Partition:
    """A partition in force; :meth:`heal` (or leaving its ``with`` block) lifts it."""

    def __init__(self, lab: Lab, preferences: list[int], what: str) -> None:
        self.lab, self.preferences, self.what = lab, preferences, what

    def heal(self) -> None:
        for preference in self.preferences:
            run("ip", "-n", self.lab.core, "rule", "del", "pref", str(preference), check=False)
        self.preferences = []

    def __enter__(self) -> Partition:
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()


class Lab:
    """Hosts as network namespaces. Use as a context manager: everything it made is removed when
    the block ends, on an exception or Ctrl-C too, and by a reaper process if the caller is killed."""

    def __init__(self, hosts: Sequence[HostSpec], lab_id: str | None = None) -> None:
        names = [h.name for h in hosts]
        if not hosts or len(set(names)) != len(names) or len(hosts) > 250:
            raise ValueError(f"a lab needs 1-250 hosts with distinct names, not {names}")
        self.hosts = {h.name: h for h in hosts}
        self.id = lab_id or uuid.uuid4().hex[:6]
        self.prefix = f"{PREFIX}{self.id}-"
        self.core = f"{self.prefix}core"
        self._index = {name: i for i, name in enumerate(names, start=1)}
        self._reaper: subprocess.Popen | None = None

    # ------------------------------------------------------------------ addresses and names
    def namespace(self, host: str) -> str:
        """The network namespace the host's processes run in."""
        return f"{self.prefix}{self._spec(host).name}"

    def address(self, host: str) -> str:
        """Where the other hosts reach ``host`` (behind NAT: its router's public address, which
        accepts no connection)."""
        return f"10.77.{self._index[self._spec(host).name]}.2"

    def own_address(self, host: str) -> str:
        """The address ``host`` itself holds (behind NAT: a private one no other host can route to)."""
        spec = self._spec(host)
        return f"192.168.{self._index[spec.name]}.2" if spec.nat else self.address(host)

    def _spec(self, host: str) -> HostSpec:
        if host not in self.hosts:
            raise KeyError(f"no host {host!r} in this lab (hosts: {', '.join(self.hosts)})")
        return self.hosts[host]

    # ------------------------------------------------------------------ build and tear down
    def __enter__(self) -> Lab:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Build the lab (a failure part way removes what was built)."""
        require(nat=any(h.nat for h in self.hosts.values()))
        self._reaper = subprocess.Popen([sys.executable, "-m", "echo2.lab.reaper", self.prefix],
                                        stdin=subprocess.PIPE, start_new_session=True)
        try:
            self._namespace(self.core, forward=True)
            for name, spec in self.hosts.items():
                self._host(self._index[name], spec)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Remove every namespace of this lab and stop what runs in them."""
        remove(self.prefix)
        if self._reaper is not None:
            self._reaper.stdin.close()  # the reaper finds nothing left and exits
            self._reaper.wait(timeout=30)
            self._reaper = None

    def _namespace(self, namespace: str, forward: bool = False) -> None:
        run("ip", "netns", "add", namespace)
        run("ip", "-n", namespace, "link", "set", "lo", "up")
        if forward:
            in_ns(namespace, "sysctl", "-qw", "net.ipv4.ip_forward=1")

    def _link(self, a: str, a_dev: str, a_cidr: str, b: str, b_dev: str, b_cidr: str) -> None:
        """A veth pair from namespace ``a`` to ``b``, addressed and up."""
        run("ip", "link", "add", a_dev, "netns", a, "type", "veth", "peer", "name", b_dev, "netns", b)
        for namespace, dev, cidr in ((a, a_dev, a_cidr), (b, b_dev, b_cidr)):
            run("ip", "-n", namespace, "addr", "add", cidr, "dev", dev)
            run("ip", "-n", namespace, "link", "set", dev, "up")

    def _host(self, i: int, spec: HostSpec) -> None:
        host = f"{self.prefix}{spec.name}"
        self._namespace(host)
        if spec.nat:
            router = f"{host}-r"
            self._namespace(router, forward=True)
            self._link(self.core, f"h{i}", f"10.77.{i}.1/24", router, "wan", f"10.77.{i}.2/24")
            run("ip", "-n", router, "route", "add", "default", "via", f"10.77.{i}.1")
            self._link(router, "lan", f"192.168.{i}.1/24", host, "eth0", f"192.168.{i}.2/24")
            run("ip", "-n", host, "route", "add", "default", "via", f"192.168.{i}.1")
            nft(router, NAT_RULES)
            near, near_dev = router, "lan"
        else:
            self._link(self.core, f"h{i}", f"10.77.{i}.1/24", host, "eth0", f"10.77.{i}.2/24")
            run("ip", "-n", host, "route", "add", "default", "via", f"10.77.{i}.1")
            near, near_dev = self.core, f"h{i}"
        self._shape(host, "eth0", spec.up_mbps)
        self._shape(near, near_dev, spec.down_mbps)

    @staticmethod
    def _shape(namespace: str, dev: str, mbps: float | None) -> None:
        """Cap what leaves ``dev`` at ``mbps`` (tbf; a burst of 10 ms at that rate, at least 16 KiB)."""
        if mbps is None:
            return
        burst = max(16 * 1024, int(mbps * 1e6 / 8 * 0.01))
        in_ns(namespace, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbps * 1000:.0f}kbit",
              "burst", str(burst), "latency", QUEUE_LATENCY)

    # ------------------------------------------------------------------ use
    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` as a command line that runs it inside ``host``."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def popen(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` inside ``host`` (``subprocess.Popen`` keyword arguments apply)."""
        return subprocess.Popen(self.command(host, argv), **kwargs)

    def run(self, host: str, argv: Sequence[str], timeout: float = 60.0, **kwargs: Any
            ) -> subprocess.CompletedProcess:
        """Run ``argv`` inside ``host`` to its end (``subprocess.run`` keyword arguments apply)."""
        return subprocess.run(self.command(host, argv), timeout=timeout, **kwargs)

    def partition(self, host: str, peer: str | None = None,
                  mode: Literal["blackhole", "reject"] = "blackhole") -> Partition:
        """Cut ``host`` off from every host, or from ``peer`` only; returns the handle that heals it."""
        action = {"blackhole": "blackhole", "reject": "prohibit"}[mode]
        # matched by the link a packet arrives on, so that the core's own ICMP refusal (generated
        # locally) still reaches the sender in reject mode
        i = self._index[self._spec(host).name]
        if peer is None:
            others = [self._index[name] for name in self.hosts if name != host]
            selectors = [["iif", f"h{i}"]] + [["iif", f"h{j}", "to", f"{self.address(host)}/32"] for j in others]
        else:
            j = self._index[self._spec(peer).name]
            selectors = [["iif", f"h{i}", "to", f"{self.address(peer)}/32"],
                         ["iif", f"h{j}", "to", f"{self.address(host)}/32"]]
        preferences = []
        for selector in selectors:
            preference = max(self._partition_rules(), default=PARTITION_PREFERENCE - 1) + 1
            run("ip", "-n", self.core, "rule", "add", *selector, action, "pref", str(preference))
            preferences.append(preference)
        return Partition(self, preferences, f"{host} {'<-/->' + ' ' + peer if peer else 'from every host'} "
                                            f"({mode})")

    def _partition_rules(self) -> list[int]:
        """The preferences of the partition rules in force (whoever added them: a test, the CLI)."""
        rules = json.loads(run("ip", "-j", "-n", self.core, "rule", "show") or "[]")
        return [r["priority"] for r in rules if PARTITION_PREFERENCE <= r.get("priority", 0) < KERNEL_PREFERENCE]

    def heal_all(self) -> int:
        """Lift every partition in force; how many rules that removed."""
        found = self._partition_rules()
        for preference in found:
            run("ip", "-n", self.core, "rule", "del", "pref", str(preference), check=False)
        return len(found)

    def describe(self) -> dict[str, Any]:
        """Plain data: each host's namespace, addresses, rates and NAT (``echo2 lab up`` prints it)."""
        return {"id": self.id, "hosts": {
            name: {"namespace": self.namespace(name), "address": self.address(name),
                   "own_address": self.own_address(name), "up_mbps": spec.up_mbps, "down_mbps": spec.down_mbps,
                   "nat": spec.nat} for name, spec in self.hosts.items()}}

