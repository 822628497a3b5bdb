"""Engines move data and call the engine-free core (:mod:`distcal.core`).

``local`` runs in this process (pandas, pyarrow, Parquet); ``spark`` and
``dask`` run the same pipeline on a cluster (docs/design.md). Each is an
:class:`~distcal.engines.base.Engine`; :func:`get_engine` returns one by
name and imports the engine's libraries only then.
"""

from __future__ import annotations

from typing import Any

from ..errors import ParameterError
from .base import Engine, Ranges

__all__ = ["ENGINES", "Engine", "Ranges", "engine_of", "get_engine", "resolve_engine"]

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


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (its libraries are imported now, not before)."""
    if name == "local":
        from .local import LocalEngine

        return LocalEngine()
    if name == "spark":
        from .spark import SparkEngine

        return SparkEngine()
    if name == "dask":
        from .dask import DaskEngine

        return DaskEngine()
    raise ValueError(f"engine must be one of {ENGINES}, got {name!r}")
