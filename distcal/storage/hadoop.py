"""Any Hadoop-compatible path (hdfs://, s3a://, abfss://, gs://, ...) through Spark's JVM.

The session's Hadoop ``FileSystem`` is used over py4j, so the cluster's
connectors and credentials apply. Renames are those of the store: atomic on
HDFS, a copy on object stores. There is no atomic exchange, so the publish
algorithm moves an old output aside and the next run restores it if a
crash left the target empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import FileSystem

__all__ = ["HadoopFileSystem", "qualified"]


def qualified(path: str, spark: Any) -> str:
    """``path`` as Spark's own writers resolve it: one without a scheme is on the
    session's default filesystem (``fs.defaultFS``: HDFS on a YARN cluster), relative
    to the JVM's working directory there. Unchanged with a scheme, and on Spark Connect
    (no JVM on the client: the server resolves it)."""
    if "://" in path or path.startswith("file:"):
        return path
    try:
        fs = HadoopFileSystem(spark)
    except AttributeError:  # Spark Connect
        return path
    p, store = fs._path(path)
    return str(store.makeQualified(p).toString())


class HadoopFileSystem(FileSystem):
    """The FileSystem calls the publish algorithm needs, for one Spark session."""

    local = False

    def __init__(self, spark: Any):
        self.jvm = spark.sparkContext._jvm
        self.conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _path(self, uri: str) -> tuple[Any, Any]:
        p = self.jvm.org.apache.hadoop.fs.Path(str(uri))
        return p, p.getFileSystem(self.conf)

    def exists(self, path: str) -> bool:
        p, fs = self._path(path)
        return bool(fs.exists(p))

    def makedirs(self, path: str) -> None:
        p, fs = self._path(path)
        fs.mkdirs(p)

    def listdir(self, path: str) -> list[str]:
        p, fs = self._path(path)
        if not fs.exists(p):
            return []
        return [str(st.getPath().getName()) for st in fs.listStatus(p)]

    def rename_noreplace(self, src: str, dst: str) -> bool:
        # Hadoop's rename onto an existing directory moves src *into* it: check first.
        ps, fs = self._path(src)
        pd, _ = self._path(dst)
        if fs.exists(pd):
            return False
        if not fs.rename(ps, pd):
            raise OSError(f"could not rename '{src}' to '{dst}'")
        return True

    def remove(self, path: str) -> None:
        p, fs = self._path(path)
        fs.delete(p, True)

    def put(self, local: Path, path: str) -> None:
        p, fs = self._path(path)
        fs.copyFromLocalFile(False, True, self.jvm.org.apache.hadoop.fs.Path(str(local)), p)

    def get(self, path: str, local: Path) -> None:
        p, fs = self._path(path)
        fs.copyToLocalFile(False, p, self.jvm.org.apache.hadoop.fs.Path(str(local)), True)
