"""Removes a lab when the process that built it dies, however it dies.

``python -m echo2.lab.reaper PREFIX`` is started by :class:`echo2.lab.Lab` in a session of its
own (a Ctrl-C to the caller's terminal does not reach it) with a pipe from the caller as its
stdin. It waits for that pipe to close: the caller closed it after tearing the lab down itself, or
the caller died (a crash, SIGKILL), and the kernel closed it. Either way it then removes every
namespace named with ``PREFIX``, with whatever still runs in them.
"""

from __future__ import annotations

import sys

from echo2.lab.commands import remove


def main() -> None:
    prefix = sys.argv[1]
    while sys.stdin.buffer.read(1 << 16):  # nothing is ever written: only the end matters
        pass
    remove(prefix)


if __name__ == "__main__":
    main()
