"""Files on any Hadoop-compatible filesystem the Spark session can reach.

Local paths (no scheme, or ``file:``) are handled in Python; anything else
(hdfs://, s3a://, abfss://, gs://, ...) through the session's Hadoop
``FileSystem`` over py4j. A directory is published atomically the same way
everywhere: written under a temporary sibling name, then renamed into place
(on object stores, whose rename is a copy, as atomically as they allow).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["is_local", "local_path", "exists", "publish_dir", "fetch_dir", "swap_into_place",
           "HadoopFS"]


def is_local(uri: str) -> bool:
    s = str(uri)
    return s.startswith("file:") or "://" not in s


def local_path(uri: str) -> str:
    uri = str(uri)
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    return uri


class HadoopFS:
    """The few FileSystem calls we need, for one session."""

    def __init__(self, spark: Any):
        self.jvm = spark.sparkContext._jvm
        self.conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _path(self, uri: str) -> Any:
        p = self.jvm.org.apache.hadoop.fs.Path(uri)
        return p, p.getFileSystem(self.conf)

    def exists(self, uri: str) -> bool:
        p, fs = self._path(uri)
        return bool(fs.exists(p))

    def rename(self, src: str, dst: str) -> None:
        ps, fs = self._path(src)
        pd, _ = self._path(dst)
        if not fs.rename(ps, pd):
            raise OSError(f"could not rename '{src}' to '{dst}'")

    def delete(self, uri: str) -> None:
        p, fs = self._path(uri)
        fs.delete(p, True)

    def put(self, local: str, uri: str) -> None:
        p, fs = self._path(uri)
        fs.copyFromLocalFile(False, True, self.jvm.org.apache.hadoop.fs.Path(local), p)

    def get(self, uri: str, local: str) -> None:
        p, fs = self._path(uri)
        fs.copyToLocalFile(False, p, self.jvm.org.apache.hadoop.fs.Path(local), True)


def _sibling(uri: str, tag: str) -> str:
    uri = str(uri).rstrip("/")
    head, _, name = uri.rpartition("/")
    return f"{head}/.{name}.{tag}-{uuid.uuid4().hex[:12]}" if head else \
        f".{name}.{tag}-{uuid.uuid4().hex[:12]}"


def exists(spark: Any, uri: str) -> bool:
    if is_local(uri):
        return Path(local_path(uri)).exists()
    return HadoopFS(spark).exists(uri)


def swap_into_place(spark: Any, tmp: str, target: str, overwrite: bool) -> None:
    """Rename ``tmp`` to ``target``; an existing target is moved aside first, then removed."""
    if is_local(target):
        t, n = local_path(target), local_path(tmp)
        if os.path.exists(t):
            if not overwrite:
                raise FileExistsError(f"output '{target}' exists (use overwrite to replace it)")
            old = local_path(_sibling(target, "old"))
            os.rename(t, old)
            os.rename(n, t)
            shutil.rmtree(old, ignore_errors=True) if os.path.isdir(old) else os.remove(old)
        else:
            Path(t).parent.mkdir(parents=True, exist_ok=True)
            os.rename(n, t)
        return
    fs = HadoopFS(spark)
    if fs.exists(target):
        if not overwrite:
            raise FileExistsError(f"output '{target}' exists (use overwrite to replace it)")
        old = _sibling(target, "old")
        fs.rename(target, old)
        fs.rename(tmp, target)
        fs.delete(old)
    else:
        fs.rename(tmp, target)


def publish_dir(spark: Any, write: Callable[[Path], None], target: str,
                overwrite: bool) -> None:
    """Write a directory locally with ``write(path)``, then publish it at ``target``."""
    if is_local(target):
        from ..io import atomic_path

        with atomic_path(local_path(target), overwrite=overwrite) as tmp:
            write(tmp)
        return
    fs = HadoopFS(spark)
    with tempfile.TemporaryDirectory(prefix="distcal-") as d:
        staged = Path(d) / "out"
        write(staged)
        remote_tmp = _sibling(target, "tmp")
        fs.put(str(staged), remote_tmp)
        try:
            swap_into_place(spark, remote_tmp, target, overwrite)
        except BaseException:
            fs.delete(remote_tmp)
            raise


def fetch_dir(spark: Any, uri: str, read: Callable[[Path], Any]) -> Any:
    """Copy a directory from ``uri`` to a local temporary one and ``read`` it there."""
    if is_local(uri):
        return read(Path(local_path(uri)))
    with tempfile.TemporaryDirectory(prefix="distcal-") as d:
        HadoopFS(spark).get(uri, str(Path(d) / "in"))
        return read(Path(d) / "in")
