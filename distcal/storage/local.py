"""This machine's filesystem, with Linux's atomic rename flags.

``os.rename`` replaces an existing file silently and fails on a non-empty
directory, so "publish only if absent" and "replace in one step" need
``renameat2(2)``: ``RENAME_NOREPLACE`` creates the target atomically or
fails with EEXIST (two concurrent runs cannot both win), and
``RENAME_EXCHANGE`` swaps two directories in one step (a crash leaves the
old or the new output, never nothing). Python's ``os`` module does not
expose renameat2, so it is called through ctypes; where the kernel, libc
or filesystem lacks it, the caller falls back to check-then-rename.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
from pathlib import Path
from typing import Any

from .base import FileSystem, local_path

__all__ = ["LocalFileSystem"]

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


def _load_renameat2() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()


def _rename_flags(src: str, dst: str, flags: int) -> int:
    """0 on success, else the errno (-1 when renameat2 is not available at all)."""
    if _renameat2 is None:
        return -1
    rc = _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags)
    return 0 if rc == 0 else ctypes.get_errno()


class LocalFileSystem(FileSystem):
    """Files and directories of this machine (plain paths or ``file:`` URLs)."""

    local = True

    def exists(self, path: str) -> bool:
        path = local_path(path)
        return os.path.lexists(path)

    def makedirs(self, path: str) -> None:
        path = local_path(path)
        os.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        path = local_path(path)
        try:
            return os.listdir(path or ".")
        except (FileNotFoundError, NotADirectoryError):
            return []

    def rename_noreplace(self, src: str, dst: str) -> bool:
        src, dst = local_path(src), local_path(dst)
        err = _rename_flags(src, dst, _RENAME_NOREPLACE)
        if err == 0:
            return True
        if err == errno.EEXIST:
            return False
        if err != -1 and err not in _UNSUPPORTED:
            raise OSError(err, os.strerror(err), dst)
        if os.path.lexists(dst):  # no renameat2 here: check, then rename
            return False
        os.rename(src, dst)
        return True

    def exchange(self, a: str, b: str) -> bool:
        a, b = local_path(a), local_path(b)
        err = _rename_flags(a, b, _RENAME_EXCHANGE)
        if err == 0:
            return True
        if err == -1 or err in _UNSUPPORTED:
            return False
        raise OSError(err, os.strerror(err), b)

    def remove(self, path: str) -> None:
        path = local_path(path)
        p = Path(path)
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)

    def put(self, local: Path, path: str) -> None:
        path = local_path(path)
        if Path(local).is_dir():
            shutil.copytree(local, path)
        else:
            shutil.copyfile(local, path)

    def get(self, path: str, local: Path) -> None:
        self.put(Path(local_path(path)), str(local))
