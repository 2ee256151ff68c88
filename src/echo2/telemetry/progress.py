"""The live console progress line, and the sample completions printed at each evaluation."""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("echo2")


class Progress:
    """One line rewritten in place on a terminal; a plain log line every ``every`` steps otherwise."""

    def __init__(self, total_steps: int, enabled: bool = True, every: int = 10) -> None:
        self.total, self.enabled, self.every = total_steps, enabled, every
        self.tty = sys.stderr.isatty()
        self.started = time.time()

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

    def newline(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")
