"""What is at a path: a distcal output of some kind, or something distcal must not touch.

``--overwrite`` (``overwrite=True``) replaces only a previous output of the
same kind: a model directory (it holds ``model.json``), a report directory
(``report.json``), a summary directory (``summary.json``), a Spark ML
calibrator's directory (``model/model.json``), each file the JSON distcal
writes there (locally: other tools write a ``model.json`` too), or Parquet (a file starting
with the ``PAR1`` magic, or a dataset directory whose visible files are
all Parquet). Anything else
(a device, a FIFO, a socket, a symbolic link, a directory that is not one
of ours, a file that is not Parquet) is refused before anything is written.

Inputs are read only from regular files: :func:`check_regular_input`
refuses FIFOs, devices and sockets (as the input itself, or inside a
dataset directory) before any reader opens them, so a read can never block
on a FIFO or run without end on ``/dev/zero``.

Every check uses ``lstat``/``stat`` and, where bytes are read, an
``O_NONBLOCK | O_NOFOLLOW`` descriptor whose ``fstat`` is checked again.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from typing import Any

from ..errors import DataError, OutputPathError
from .base import FileSystem, local_path

__all__ = ["MODEL", "REPORT", "PARQUET", "SUMMARY", "STAGE", "KIND_NAMES", "output_kind",
           "check_replaceable", "describe_mode", "read_regular_file", "check_regular_input",
           "visible_files"]

MODEL, REPORT, PARQUET, SUMMARY = "model", "report", "parquet", "summary"
STAGE = "stage"  # a pyspark.ml stage's directory: Spark's metadata/ (and our model/, fitted)
KIND_NAMES = {MODEL: "a model directory", REPORT: "a report directory",
              PARQUET: "a Parquet file or dataset", SUMMARY: "a summary directory",
              STAGE: "a Spark ML calibrator directory"}
# The file(s) that tell a directory's kind (any one of them).
_MARKERS = {MODEL: ("model.json",), REPORT: ("report.json",), SUMMARY: ("summary.json",),
            STAGE: ("model/model.json", "metadata/_SUCCESS")}
# Marker files other tools write too (TensorFlow.js's model.json) are read: the
# JSON object distcal writes there has "format": "distcal-..." near its start (its
# keys sorted, or the key first); a 0.1 multiclass model.json and a report.json of
# an earlier version, which have none, are parsed whole when not larger than this.
_MARKER_HEAD_BYTES = 1 << 16
_MAX_MARKER_BYTES = 1 << 26
_DISTCAL_FORMAT = re.compile(rb'"format"\s*:\s*"distcal-')
_PARQUET_MAGIC = b"PAR1"
# A dataset directory with more files than this is taken on its first ones.
_MAX_DATASET_FILES = 10_000


def describe_mode(mode: int) -> str:
    """What a non-regular ``st_mode`` is, in words ("a FIFO", "a character device", ...)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _head(path: str, size: int) -> bytes:
    """Up to the first ``size`` bytes of the regular file ``path`` (b"" for anything
    else; never blocks, never follows a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return b""
    try:
        return os.read(fd, size) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def _starts_with_magic(path: str) -> bool:
    """Whether the regular file ``path`` starts with Parquet's magic (never blocks)."""
    return _head(path, len(_PARQUET_MAGIC)) == _PARQUET_MAGIC


def visible_files(root: str, limit: int = _MAX_DATASET_FILES) -> list[str]:
    """Entries of a dataset directory as pyarrow lists them (no ``.``/``_`` names), sorted.

    Directories are walked (hive partitions); every other entry, whatever it
    is (FIFOs, links), is returned, at most ``limit`` of them.
    """
    out: list[str] = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith((".", "_")))
        out += [os.path.join(d, f) for f in sorted(files) if not f.startswith((".", "_"))]
        if len(out) >= limit:
            break
    return out[:limit]


def _written_by_distcal(marker: str) -> bool:
    """Whether the JSON file ``marker`` (``model.json``, ...) is one distcal writes:
    a model's or a summary's ``"format": "distcal-..."`` (a 0.1 multiclass model's
    ``class_models``), a report's ``table``; Spark's ``_SUCCESS`` holds nothing."""
    if marker.endswith("_SUCCESS"):
        return True
    if _DISTCAL_FORMAT.search(_head(marker, _MARKER_HEAD_BYTES)):
        return True
    try:
        doc = json.loads(read_regular_file(marker, _MAX_MARKER_BYTES))
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(doc, dict):
        return False
    if marker.endswith("report.json"):
        return "table" in doc
    return str(doc.get("format", "")).startswith("distcal-") or "class_models" in doc


def _local_kind(path: str) -> tuple[str | None, str]:
    """(kind or None, what it is in words) for a local path."""
    try:
        st = os.lstat(path)
    except OSError:
        return None, "missing"
    if stat.S_ISDIR(st.st_mode):
        for kind, markers in _MARKERS.items():
            for marker in markers:
                try:
                    if stat.S_ISREG(os.lstat(os.path.join(path, marker)).st_mode):
                        if _written_by_distcal(os.path.join(path, marker)):
                            return kind, KIND_NAMES[kind]
                        return None, f"a directory whose {marker} distcal did not write"
                except OSError:
                    pass
        files = visible_files(path)
        if (files or os.path.lexists(os.path.join(path, "_SUCCESS"))) and all(
                _starts_with_magic(f) for f in files):
            return PARQUET, KIND_NAMES[PARQUET]
        return None, "a directory that is not a distcal output"
    if stat.S_ISREG(st.st_mode):
        if _starts_with_magic(path):
            return PARQUET, KIND_NAMES[PARQUET]
        return None, "a file that is not Parquet"
    return None, describe_mode(st.st_mode)


def output_kind(fs: FileSystem, path: str) -> tuple[str | None, str]:
    """What is at ``path``: (``"model"``/``"report"``/``"parquet"`` or None, in words).

    On remote stores a directory holding ``model.json`` or ``report.json``
    is that kind, and anything else is taken as Parquet (reading bytes of
    every file of an object store to tell would cost more than the write).
    """
    if fs.local:
        return _local_kind(local_path(path))
    base = str(path).rstrip("/")
    for kind, markers in _MARKERS.items():
        if any(fs.exists(f"{base}/{marker}") for marker in markers):
            return kind, KIND_NAMES[kind]
    return PARQUET, KIND_NAMES[PARQUET]


def check_replaceable(fs: FileSystem, target: str, kind: str | None, shown: str = "") -> None:
    """Refuse to replace ``target`` unless it is a distcal output (of ``kind``, if given).

    Raises :class:`~distcal.errors.OutputPathError` naming what is there.
    """
    actual, what = output_kind(fs, target)
    shown = shown or target
    if actual is None:
        raise OutputPathError(f"output '{shown}' is {what}; overwrite replaces only a previous "
                              f"distcal output ({', '.join(KIND_NAMES.values())})")
    if kind is not None and actual != kind:
        raise OutputPathError(f"output '{shown}' is {what}, not {KIND_NAMES[kind]}; overwrite "
                              "replaces only a previous output of the same kind")


def read_regular_file(path: str, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them, never blocking.

    The path is checked with ``stat`` before it is opened (a FIFO, a device
    or a socket is refused without opening it), opened ``O_NONBLOCK`` and
    checked again on the descriptor (it may have changed in between), and
    read by chunks whose total is capped by the bytes actually read, not by
    the size the filesystem reports. ``OSError`` and ``ValueError`` (too
    large, not regular) for the caller to word.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} '{path}' is {describe_mode(st.st_mode)}, not a regular file")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{what} '{path}' is {describe_mode(st.st_mode)}, not a regular "
                             "file")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise ValueError(f"{what} '{path}' is larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def check_regular_input(path: Any) -> None:
    """Refuse a local input that is not a regular file or a directory of regular files.

    A FIFO (it would block the reader forever), a device (``/dev/zero``
    never ends) or a socket, as the input or inside a dataset directory
    (symbolic links followed, hidden ``.``/``_`` names skipped as the
    readers skip them), is a :class:`~distcal.DataError` naming it. Remote
    URLs are left to their store.
    """
    p = os.fspath(path)
    if "://" in p and not p.startswith("file:"):
        return
    p = local_path(p)
    try:
        st = os.stat(p)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return  # each reader says "does not exist" in its own words
        raise DataError(f"input '{p}' cannot be read: {exc.strerror}") from exc
    if stat.S_ISDIR(st.st_mode):
        for f in visible_files(p, limit=1 << 62):
            try:
                fst = os.stat(f)
            except OSError as exc:
                raise DataError(f"input file '{f}' cannot be read: {exc.strerror}") from exc
            if not stat.S_ISREG(fst.st_mode) and not stat.S_ISDIR(fst.st_mode):
                raise DataError(f"input file '{f}' is {describe_mode(fst.st_mode)}, not a "
                                "regular file; an input holds regular Parquet files only")
        return
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"input '{p}' is {describe_mode(st.st_mode)}, not a regular file; an "
                        "input is a Parquet file or a directory of Parquet files")
