"""Engines move data and call the engine-free core (:mod:`distcal.core`).

``local`` runs in this process (pandas, pyarrow, Parquet); ``spark`` and
``dask`` run the same pipeline on a cluster (docs/design.md). Each is an
:class:`~distcal.engines.base.Engine`; :func:`get_engine` returns one by
name and imports the engine's libraries only then.
"""

from __future__ import annotations

from .base import Engine, KeyedRanges
from .frames import ENGINES, check_engine_name, engine_of, refuse_cluster_frames, resolve_engine

__all__ = ["ENGINES", "Engine", "KeyedRanges", "engine_of", "get_engine", "resolve_engine",
           "check_engine_name", "refuse_cluster_frames"]

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
