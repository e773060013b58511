"""Platform SDKs retry a dropped connection by themselves, but some log each attempt as an ERROR
with a traceback, which reads like a crash to whoever watches the log. A `RecoveredFaults` filter
on the SDK's logger turns exactly those records into one WARNING line naming the fault; every
other record, genuine errors included, passes untouched."""

from __future__ import annotations

import logging
from collections.abc import Callable

Recognise = Callable[[logging.LogRecord, BaseException | None], bool]


class RecoveredFaults(logging.Filter):
    def __init__(self, surface: str, recognise: Recognise) -> None:
        super().__init__()
        self._surface = surface
        self._recognise = recognise

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        fault = record.exc_info[1] if record.exc_info else None
        if not self._recognise(record, fault):
            return True
        lines = record.getMessage().splitlines()
        message = lines[0] if lines else ""
        if fault is not None:
            message += f" ({type(fault).__name__}: {fault})"
        record.msg, record.args = f"{self._surface}: {message}", None
        record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        record.exc_info = record.exc_text = None
        return True


def tame(logger: str | logging.Logger, faults: RecoveredFaults) -> logging.Logger:
    """Attach `faults` to a logger (once; attaching the same filter again is a no-op)."""
    target = logger if isinstance(logger, logging.Logger) else logging.getLogger(logger)
    target.addFilter(faults)
    return target
