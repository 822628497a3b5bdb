"""Where outputs go: one publish/fetch algorithm over three kinds of store.

Every output distcal writes (model directories, reports, Parquet tables
written by ``apply``) is written aside under a temporary sibling name and
then committed into place, so that a reader sees the old complete output or
the new complete one, never a mix (:mod:`distcal.storage.publish`). The
stores only provide a handful of primitive operations
(:class:`~distcal.storage.base.FileSystem`):

* :class:`~distcal.storage.local.LocalFileSystem`: this machine's files;
  commits with Linux ``renameat2`` (create-if-absent, atomic exchange).
* :class:`~distcal.storage.fsspec.FsspecFileSystem`: any fsspec URL
  (``s3://``, ``gs://``, ``memory://``, ...), used by the Dask backend.
* :class:`~distcal.storage.hadoop.HadoopFileSystem`: any Hadoop-compatible
  path through a Spark session's JVM (``hdfs://``, ``s3a://``, ...).

:func:`filesystem_for` picks one for a path.
"""

from __future__ import annotations

from typing import Any

from .base import FileSystem, is_local_uri, local_path, within
from .kinds import (
    MODEL,
    PARQUET,
    REPORT,
    STAGE,
    SUMMARY,
    check_regular_input,
    read_regular_file,
)
from .local import LocalFileSystem
from .publish import (
    OutputExistsError,
    OutputPathError,
    check_commit,
    check_target,
    commit_guard,
    fetch_dir,
    local_publishing,
    publish_dir,
    publishing,
    publishing_dir,
    refuse_existing,
    refuse_overlap,
    resolve_local,
)

__all__ = ["FileSystem", "LocalFileSystem", "OutputExistsError", "OutputPathError", "check_target",
           "check_commit", "commit_guard",
           "filesystem_for", "fetch_dir", "is_local_uri", "local_path", "within",
           "local_publishing", "publish_dir", "publishing", "publishing_dir", "refuse_existing",
           "refuse_overlap", "resolve_local", "check_regular_input", "read_regular_file",
           "MODEL", "REPORT", "PARQUET", "SUMMARY", "STAGE"]


def filesystem_for(uri: str, spark: Any = None) -> FileSystem:
    """The store of ``uri``: local files, the Spark session's Hadoop FileSystem, or fsspec.

    Paths without a scheme and ``file:`` URLs are local. Anything else goes
    through the JVM when a Spark session is given (so that Hadoop's
    credentials and connectors apply), and through fsspec otherwise (a Spark
    Connect session has no JVM on the client: fsspec, with the client's
    credentials).
    """
    if is_local_uri(uri):
        return LocalFileSystem()
    if spark is not None:
        from .hadoop import HadoopFileSystem

        try:
            return HadoopFileSystem(spark)
        except AttributeError:  # Spark Connect
            pass
    from .fsspec import FsspecFileSystem

    return FsspecFileSystem.for_uri(uri)
