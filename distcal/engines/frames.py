"""Which engine a piece of data belongs to, and the checks on engine names.

A leaf module: every engine imports it, and it imports no engine.
"""

from __future__ import annotations

from typing import Any

from ..errors import ParameterError

__all__ = ["ENGINES", "engine_of", "refuse_cluster_frames", "check_engine_name",
           "resolve_engine"]

ENGINES = ("local", "spark", "dask")


def engine_of(data: Any) -> str:
    """The engine a piece of data belongs to, from its type alone (no imports)."""
    module = type(data).__module__ or ""
    if module.startswith("pyspark."):
        return "spark"
    if module.startswith("dask.") or module.startswith("dask_expr"):
        return "dask"
    return "local"


def refuse_cluster_frames(data: Any) -> None:
    """``TypeError`` for a Spark or Dask frame given to the local engine (it would collect it)."""
    if engine_of(data) != "local":
        raise TypeError(f"engine='local' would collect a {engine_of(data)} DataFrame's rows to "
                        "this process; use engine='auto' (or the frame's own engine)")


def check_engine_name(engine: str) -> str:
    """``engine`` if it is "auto" or a known engine, else ``ValueError``."""
    if engine != "auto" and engine not in ENGINES:
        raise ParameterError(f"engine must be 'auto' or one of {ENGINES}, got {engine!r}")
    return engine


def resolve_engine(data: Any, engine: str) -> str:
    """The engine to run: the data's own for "auto", else the one asked for."""
    check_engine_name(engine)
    return engine_of(data) if engine == "auto" else engine
