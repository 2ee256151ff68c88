"""What a lab host is: a name, its link's rates, and whether it sits behind NAT.

Rates are in Mbit/s, as providers sell links and as the rest of echo2 states them
(:mod:`echo2.units`); None is an unshaped link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A host's name: it becomes part of a network namespace's name and of interface names.
HOST_NAME = re.compile(r"[a-z][a-z0-9]{0,11}")


@dataclass(frozen=True)
class HostSpec:
    name: str
    up_mbps: float | None = None
    """Its uplink (what it sends), enforced by the kernel; None: unshaped."""
    down_mbps: float | None = None
    """Its downlink (what it receives), enforced by the kernel; None: unshaped."""
    nat: bool = False
    """Behind a masquerading router: it can connect out, nothing can connect in."""

    def __post_init__(self) -> None:
        if HOST_NAME.fullmatch(self.name) is None:
            raise ValueError(f"a lab host name is 1-12 lowercase letters and digits starting with a letter, "
                             f"not {self.name!r}")
        for what, rate in (("uplink", self.up_mbps), ("downlink", self.down_mbps)):
            if rate is not None and not 0.01 <= rate <= 100_000:
                raise ValueError(f"host {self.name}: {what} {rate} Mbit/s is outside 0.01-100000")

    @classmethod
    def parse(cls, text: str) -> HostSpec:
        """``NAME[:UP[:DOWN]][:nat]`` (Mbit/s; DOWN defaults to UP), e.g. ``w1:50:200:nat``."""
        parts = text.split(":")
        nat = parts[-1] == "nat"
        if nat:
            parts = parts[:-1]
        if not 1 <= len(parts) <= 3:
            raise ValueError(f"a lab host is NAME[:UP_MBPS[:DOWN_MBPS]][:nat], not {text!r}")
        try:
            rates = [float(p) for p in parts[1:]]
        except ValueError:
            raise ValueError(f"a lab host is NAME[:UP_MBPS[:DOWN_MBPS]][:nat] with rates in Mbit/s, "
                             f"not {text!r}") from None
        up = rates[0] if rates else None
        down = rates[1] if len(rates) > 1 else up
        return cls(parts[0], up, down, nat)
