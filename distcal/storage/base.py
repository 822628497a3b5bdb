"""The few operations the publish algorithm needs from a store."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

__all__ = ["FileSystem", "is_local_uri", "local_path", "split_uri", "normal_path", "within"]


class FileSystem(Protocol):
    """A store of files and directories addressed by path strings.

    ``local`` says whether a path of this store can be written directly by
    this process (then writers get the temporary path itself, otherwise a
    local staging directory that :meth:`put` copies up). The stores subclass
    it for :meth:`rename` and :meth:`exchange`, the same on every store.
    """

    local: bool

    def exists(self, path: str) -> bool:
        """Whether anything (file, directory, link) is at ``path``."""

    def makedirs(self, path: str) -> None:
        """Create the directory ``path`` and its parents if missing."""

    def listdir(self, path: str) -> list[str]:
        """Names (not paths) of the entries of directory ``path``; [] if it is missing."""

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, which must not exist."""
        if not self.rename_noreplace(src, dst):
            raise FileExistsError(errno.EEXIST, "exists", dst)

    def rename_noreplace(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst`` only if ``dst`` does not exist; False if it does.

        Atomic where the store allows it (Linux ``RENAME_NOREPLACE``);
        elsewhere a check followed by a rename.
        """

    def exchange(self, a: str, b: str) -> bool:
        """Swap ``a`` and ``b`` atomically; False when the store cannot."""
        return False

    def remove(self, path: str) -> None:
        """Remove a file or a directory tree; nothing if missing."""

    def put(self, local: Path, path: str) -> None:
        """Copy the local file or directory ``local`` to ``path``."""

    def get(self, path: str, local: Path) -> None:
        """Copy ``path`` to the local path ``local``."""


def is_local_uri(uri: str) -> bool:
    """No scheme, or ``file:``: a path of this machine."""
    s = str(uri)
    return s.startswith("file:") or "://" not in s


def local_path(uri: str) -> str:
    """The filesystem path of a local URI, as RFC 8089 reads it (``file:///x``,
    ``file://localhost/x`` and ``file:/x`` -> ``/x``; ``%20`` is a space, as for
    pyarrow, which reads the same URLs). A path without a scheme is itself."""
    s = str(uri)
    if not s.startswith("file:"):
        return s
    s = s[len("file:"):]
    if s.startswith("//"):
        host, slash, rest = s[2:].partition("/")
        if host not in ("", "localhost"):
            raise ValueError(f"'{uri}' names the host '{host}': a file URL of this machine "
                             "is file:///path")
        s = slash + rest
    return unquote(s)


def split_uri(uri: str) -> tuple[str, str]:
    """``(parent, name)`` of a path or URI, without a trailing slash."""
    s = str(uri).rstrip("/")
    head, _, name = s.rpartition("/")
    return head, name


def normal_path(uri: str) -> str:
    """One spelling of a path: local paths resolved (symlinks, ``..``), URLs without
    repeated or trailing slashes."""
    if is_local_uri(uri):
        return os.path.realpath(local_path(uri))
    scheme, _, rest = uri.partition("://")
    return scheme + "://" + "/".join(p for p in rest.split("/") if p not in ("", "."))


def within(a: str, b: str) -> bool:
    """Whether path ``a`` is ``b`` or lies under it (any spelling of either)."""
    na, nb = normal_path(a), normal_path(b)
    return na == nb or na.startswith(nb.rstrip("/") + "/")
