"""The network lab: hosts as Linux network namespaces on one box, with kernel-shaped links, NAT
and partitions, for tests, benchmarks and rehearsing a wide-area run (``echo2 lab``, docs/wan.md)."""

from echo2.lab.commands import LabError, LabUnavailable
from echo2.lab.hosts import HostSpec
from echo2.lab.network import Lab, Partition

__all__ = ["HostSpec", "Lab", "LabError", "LabUnavailable", "Partition"]
