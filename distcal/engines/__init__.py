"""Engines move data and call the engine-free core (distcal.core).

``local`` runs in this process (pandas, pyarrow, Parquet); ``spark`` and
``dask`` run the same pipeline on a cluster (ARCHITECTURE.md).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = ["engine_of", "get_engine", "resolve_engine"]

ENGINES = ("local", "spark", "dask")


def engine_of(data: Any) -> str:
    """The engine a piece of data belongs to, from its type alone (no imports)."""
    module = type(data).__module__ or ""
    if module.startswith("pyspark."):
        return "spark"
    if module.startswith("dask.") or module.startswith("dask_expr"):
        return "dask"
    return "local"


def resolve_engine(data: Any, engine: str) -> str:
    if engine == "auto":
        return engine_of(data)
    if engine not in ENGINES:
        raise ValueError(f"engine must be 'auto' or one of {ENGINES}, got {engine!r}")
    return engine


def get_engine(name: str) -> ModuleType:
    if name == "local":
        from . import local

        return local
    if name == "spark":
        from . import spark

        return spark
    if name == "dask":
        from . import dask

        return dask
    raise ValueError(f"unknown engine {name!r}")
