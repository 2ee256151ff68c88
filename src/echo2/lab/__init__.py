"""The network lab: hosts as Linux network namespaces on one box, with kernel-shaped links, NAT
and partitions, for tests, benchmarks and rehearsing a wide-area run (``echo2 lab``, docs/wan.md).

* ``network.py`` — the namespaces, the core router, links shaped by the kernel (``tbf``), NAT
  behind nftables, partitions as routing rules; ``hosts.py`` — the lab's hosts;
* ``commands.py`` — commands run inside a host; ``reaper.py`` — a process that removes a lab
  whose maker died;
* ``rehearsal.py`` — ``echo2 train`` and ``echo2 worker`` run in the lab's hosts;
  ``cli.py`` — ``echo2 lab``.
"""

from echo2.lab.commands import LabError, LabUnavailable
from echo2.lab.hosts import HostSpec
from echo2.lab.network import Lab, Partition

__all__ = ["HostSpec", "Lab", "LabError", "LabUnavailable", "Partition"]
