"""Logging for the library: the ``distcal`` logger and timed phases.

The library never prints. It logs what it read, which engine and path it
took, how many rows it used and dropped, and how long each phase took, to
``logging.getLogger("distcal")`` (INFO for the phases, DEBUG for details).
Applications decide what to show: the command line maps ``--verbose`` and
``--quiet`` to levels of this logger.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["log", "phase", "describe_input"]

log = logging.getLogger("distcal")


@contextmanager
def phase(message: str, *args: Any) -> Iterator[None]:
    """Log ``message % args`` with the time it took, at INFO level."""
    start = time.perf_counter()
    log.debug("start: " + message, *args)
    yield
    log.info(message + " (%.2f s)", *args, time.perf_counter() - start)


def describe_input(data: Any) -> str:
    """A short description of an input for the log: its path, or its type and size."""
    if isinstance(data, (str, os.PathLike)):
        return f"'{os.fspath(data)}'"
    n = getattr(data, "num_rows", None)
    if n is None and hasattr(data, "shape") and type(data).__module__.startswith("pandas"):
        n = data.shape[0]
    kind = f"{type(data).__module__.split('.')[0]}.{type(data).__name__}"
    return f"a {kind}" + (f" of {n} rows" if n is not None else "")

