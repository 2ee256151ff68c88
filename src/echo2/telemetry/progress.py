"""The live console progress line, and the sample completions printed at each evaluation."""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("echo2")
#: Without a terminal, a wait for data is logged once every this many seconds.
WAIT_LOG_EVERY_S = 15.0


class Progress:
    """One line rewritten in place on a terminal; a plain log line every ``every`` steps otherwise."""

    def __init__(self, total_steps: int, enabled: bool = True, every: int = 10) -> None:
        self.total, self.enabled, self.every = total_steps, enabled, every
        self.tty = sys.stderr.isatty()
        self.started = time.time()
        self._wait_logged = -WAIT_LOG_EVERY_S

    def update(self, step: int, version: int, reward: float, accuracy: float | None, utilization: float,
               workers: int, samples_per_s: float) -> None:
        accuracy_text = f"{accuracy:5.1%}" if accuracy is not None else "  -  "
        line = (f"step {step}/{self.total} | v{version} | reward {reward:.3f} | held-out acc {accuracy_text} | "
                f"learner util {utilization:4.0%} | workers {workers} | {samples_per_s:4.0f} samples/s | "
                f"{time.time() - self.started:4.0f}s")
        if not self.enabled:
            return
        if self.tty:
            sys.stderr.write("\r" + line + "\x1b[K")
            sys.stderr.flush()
        elif step % self.every == 0 or step == self.total:
            log.info(line)

    def waiting(self, why: str | None, waited_s: float) -> None:
        """The learner has waited ``waited_s`` for data (``why``, from the coordinator): rewritten in
        place on a terminal, else logged once every :data:`WAIT_LOG_EVERY_S` of a long wait."""
        if not self.enabled or why is None:
            return
        if self.tty:
            sys.stderr.write("\r" + why + "\x1b[K")
            sys.stderr.flush()
        elif waited_s >= WAIT_LOG_EVERY_S and time.monotonic() - self._wait_logged >= WAIT_LOG_EVERY_S:
            self._wait_logged = time.monotonic()
            log.info(why)

    def newline(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")
