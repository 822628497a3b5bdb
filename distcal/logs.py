"""Logging for the library: the ``distcal`` logger, timed phases and a progress bar.

The library never prints. It logs what it read, which engine and path it
took, how many rows it used and dropped, and how long each phase took, to
``logging.getLogger("distcal")`` (INFO for the phases, DEBUG for details).
Applications decide what to show: the command line maps ``--verbose`` and
``--quiet`` to levels of this logger.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["log", "phase", "describe_input", "progress"]

log = logging.getLogger("distcal")
T = TypeVar("T")


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


def progress(items: Iterable[T], total: Callable[[], int] | None, desc: str) -> Iterable[T]:
    """``items`` with a progress bar on a terminal; the items unchanged otherwise.

    ``total()`` (how many items there will be) is called only when the bar shows.
    The bar shows only when stderr is a terminal and the ``distcal`` logger
    lets warnings through (so ``--quiet`` silences it), and only if tqdm is
    installed.
    """
    if not (sys.stderr.isatty() and log.isEnabledFor(logging.WARNING)):
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, total=total() if total else None, desc=desc, unit="batch", leave=False,
                file=sys.stderr)
