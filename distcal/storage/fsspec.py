"""Any fsspec filesystem (``s3://``, ``gs://``, ``abfs://``, ``memory://``, ...).

Object stores have no atomic rename of a directory (a "move" is a copy
then a delete), so :meth:`FsspecFileSystem.exchange` is not offered and
the publish algorithm falls back to moving the old output aside, which the
next run restores if a crash left the target empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import FileSystem

__all__ = ["FsspecFileSystem"]


class FsspecFileSystem(FileSystem):
    """Paths of one fsspec filesystem, given as full URLs (with the scheme)."""

    local = False

    def __init__(self, fs: Any):
        self.fs = fs

    @classmethod
    def for_uri(cls, uri: str) -> FsspecFileSystem:
        import fsspec

        fs, _ = fsspec.core.url_to_fs(str(uri))
        return cls(fs)

    def _p(self, path: str) -> str:
        return str(self.fs._strip_protocol(str(path)))

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(self._p(path)))

    def makedirs(self, path: str) -> None:
        self.fs.makedirs(self._p(path), exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        try:
            entries = self.fs.ls(self._p(path), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [str(e).rstrip("/").rpartition("/")[2] for e in entries]

    def rename_noreplace(self, src: str, dst: str) -> bool:
        if self.exists(dst):
            return False
        self.fs.mv(self._p(src), self._p(dst), recursive=True)
        return True

    def remove(self, path: str) -> None:
        if self.exists(path):
            self.fs.rm(self._p(path), recursive=True)

    def put(self, local: Path, path: str) -> None:
        self.fs.put(str(local), self._p(path), recursive=Path(local).is_dir())

    def get(self, path: str, local: Path) -> None:
        self.fs.get(self._p(path), str(local), recursive=True)
