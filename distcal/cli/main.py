"""The ``distcal`` command (and ``python -m distcal``): the engine chosen by ``--engine``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .backend import Backend
from .run import exit_process, run

__all__ = ["main", "command", "backend_for"]


def backend_for(opts: dict[str, Any]) -> Backend:
    """The backend of ``--engine``: this process, an embedded Spark session, a LocalCluster."""
    engine = opts.get("engine") or "local"
    if engine == "spark":
        from .spark import SparkBackend

        return SparkBackend.embedded(opts)
    if engine == "dask":
        from .dask import DaskBackend

        return DaskBackend.local(opts)
    from .local import LocalBackend

    return LocalBackend()


def main(argv: Sequence[str] | None = None, *, process: bool = False) -> int:
    """Run ``distcal SUBCOMMAND ...`` and return the exit code (``process``: as the
    command's own process, :func:`.run.run`)."""
    return run(argv, prog="distcal", entry_point="distcal", backend_factory=backend_for,
               process=process)


def command() -> None:
    """The ``distcal`` console script: :func:`main`, then :func:`.run.exit_process`."""
    exit_process(main(process=True))


if __name__ == "__main__":
    command()
