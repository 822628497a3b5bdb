"""Publishing an output: write aside, then commit; never a mix of old and new.

The algorithm, the same on every store (:class:`~distcal.storage.base.FileSystem`):

1. Recover: if an earlier run died after moving the old output aside and
   before putting the new one in place (possible only on stores without an
   atomic exchange), the target is missing and ``.NAME.old-*`` exists: move
   it back. Temporary siblings left by runs of this host that are no longer
   alive are removed.
2. Refuse an existing target unless ``overwrite``.
3. The caller writes the new output at a temporary sibling ``.NAME.tmp-*``
   (same directory, so that the commit is a rename on the same volume). Locally
   an empty second one is made first and kept until the run ends: it shows that
   the directory takes new entries, and it keeps a concurrent run that fails
   from removing the parent directories it made while this run writes there.
4. Commit. If the target is absent: create it by a rename that fails if the
   target appeared meanwhile (``RENAME_NOREPLACE`` locally), so of two
   concurrent runs without ``overwrite`` exactly one wins and the other
   fails with :class:`OutputExistsError`. If it exists and ``overwrite``:
   swap the two atomically where the store can (``RENAME_EXCHANGE``), then
   remove the old one; elsewhere move the old one aside, rename the new one
   in, put the old one back if that fails, and remove it.
5. On any failure (including KeyboardInterrupt), the temporary siblings are
   removed and directories created for the output are removed again (only if
   empty: another run may be writing there).

Step 4 first calls the :data:`commit_guard` of the current context, if one is
set: a command-line run sets one that raises once a termination signal has
arrived (:mod:`distcal.cli.run`).
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from hashlib import sha1
from pathlib import Path
from typing import TypeVar

from ..errors import DataError, OutputPathError
from ..params import check_bool
from .base import FileSystem, local_path, split_uri, within
from .kinds import check_replaceable, output_kind

__all__ = ["OutputExistsError", "commit_guard", "check_commit", "publishing",
           "local_publishing", "publish_dir", "publishing_dir", "fetch_dir",
           "refuse_existing", "temp_sibling", "recover", "check_target", "OutputPathError",
           "resolve_local", "refuse_overlap"]

log = logging.getLogger("distcal")
T = TypeVar("T")

#: Called before every commit when set (a context variable, so only the run that
#: set it sees it). A command-line run's SIGTERM handler raises KeyboardInterrupt,
#: but a handler that runs inside a native callback (numba compiling a kernel
#: calls back into Python through ctypes) has its exception printed and dropped,
#: and the run would go on to publish; the guard raises it again here.
commit_guard: ContextVar[Callable[[], None] | None] = ContextVar("distcal_commit_guard",
                                                                 default=None)


def check_commit() -> None:
    """Run the :data:`commit_guard`, if any: just before an output is committed."""
    guard = commit_guard.get()
    if guard is not None:
        guard()


# Names longer than this are shortened in temporary siblings, so that the
# temporary name stays within the usual 255-byte limit of a file name.
_MAX_BASE = 120


class OutputExistsError(FileExistsError):
    """The output exists and ``overwrite`` was not given (or another run created it)."""

    def __init__(self, target: str,
                 remedy: str = "pass --overwrite / overwrite=True to replace it"):
        super().__init__(f"output '{target}' exists ({remedy})")
        self.target = target


def _base(name: str) -> str:
    if len(name.encode()) <= _MAX_BASE:
        return name
    return name[:60] + "~" + sha1(name.encode()).hexdigest()[:16]


def _owner() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


def temp_sibling(target: str, tag: str) -> str:
    """``.NAME.TAG-PID@HOST-RANDOM`` next to ``target``."""
    parent, name = split_uri(target)
    sib = f".{_base(name)}.{tag}-{_owner()}-{uuid.uuid4().hex[:8]}"
    return f"{parent}/{sib}" if parent else sib


def _dead_owner(entry: str, prefix: str) -> bool:
    """Whether the run that made the sibling ``PREFIX PID@HOST-RANDOM`` is gone (this host only)."""
    owner = entry[len(prefix):].rpartition("-")[0]
    pid_s, _, host = owner.partition("@")
    if host != socket.gethostname() or not pid_s.isdigit():
        return False
    try:
        os.kill(int(pid_s), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _live_owner(entry: str, prefix: str) -> bool:
    """Whether the run that made the sibling is another process of this host that still
    runs (this process's own pid: a run killed before a restart that reused it, as in a
    container that keeps its hostname and numbers its processes from 1)."""
    owner = entry[len(prefix):].rpartition("-")[0]
    pid_s, _, host = owner.partition("@")
    return (host == socket.gethostname() and pid_s.isdigit() and int(pid_s) != os.getpid()
            and not _dead_owner(entry, prefix))


def recover(fs: FileSystem, target: str) -> None:
    """Put back an old output a killed run left aside; drop dead runs' temporaries.

    An old output a live run of this host moved aside is its to put back or
    remove (it is between its two renames, on a store without an exchange).
    """
    parent, name = split_uri(target)
    base = _base(name)
    entries = fs.listdir(parent) if parent or fs.local else []
    join = (lambda e: f"{parent}/{e}") if parent else (lambda e: e)
    olds = sorted(e for e in entries if e.startswith(f".{base}.old-")
                  and not _live_owner(e, f".{base}.old-"))
    if olds and not fs.exists(target):
        log.warning("restoring %s from %s, left aside by an interrupted run", target, olds[-1])
        fs.rename_noreplace(join(olds[-1]), target)
        olds = olds[:-1]
    for e in entries:
        prefix = next((p for p in (f".{base}.tmp-", f".{base}.old-") if e.startswith(p)), None)
        if prefix is not None and (prefix.endswith("tmp-") or e in olds) and _dead_owner(e, prefix):
            log.info("removing %s, left by a run that no longer exists", join(e))
            fs.remove(join(e))


def refuse_overlap(output: str, source: str, role: str = "input") -> None:
    """A :class:`~distcal.DataError` for an output that is, lies inside or contains
    ``source``, what it is computed from (any spelling: ``./d/../d``, a trailing slash,
    a symbolic link): it would replace what it reads, or be read by a re-run."""
    where = ("is" if within(output, source) and within(source, output) else "is inside"
             if within(output, source) else "contains" if within(source, output) else None)
    if where:
        raise DataError(f"output '{output}' {where} the {role} '{source}'; an output never "
                        "replaces, or mixes with, what it is computed from")


def refuse_existing(fs: FileSystem, target: str, overwrite: bool, kind: str | None = None,
                    shown: str = "") -> None:
    """Raise :class:`OutputExistsError` if ``target`` exists and not ``overwrite``.

    With ``overwrite``, an existing ``target`` must be a distcal output (of
    ``kind`` when given): anything else is an :class:`OutputPathError`
    (:func:`~distcal.storage.kinds.check_replaceable`).
    """
    if fs.exists(target):
        if not overwrite:
            raise OutputExistsError(shown or target)
        check_replaceable(fs, target, kind, shown)


def _commit(fs: FileSystem, tmp: str, target: str, overwrite: bool, kind: str | None = None,
            shown: str = "") -> None:
    if fs.rename_noreplace(tmp, target):
        return
    if not overwrite:  # it appeared while we were writing: the other run won
        raise OutputExistsError(shown or target)
    # What replaces the target must be of the target's kind: a model replaces a
    # model, never a report or a Parquet file (checked again: it may have changed).
    check_replaceable(fs, target, kind or output_kind(fs, tmp)[0], shown)
    if fs.exchange(tmp, target):  # tmp now holds the old output
        fs.remove(tmp)
        return
    old = temp_sibling(target, "old")
    fs.rename(target, old)
    try:
        fs.rename(tmp, target)
    except BaseException:
        fs.rename(old, target)
        raise
    fs.remove(old)


def check_target(fs: FileSystem, target: str) -> None:
    """Refuse, before anything is written, a local output that cannot be created.

    Its name must fit the filesystem's limit (temporary siblings are
    shortened to fit, the name itself cannot be), and every existing
    ancestor must be a directory.
    """
    if not fs.local:
        return
    full = os.path.abspath(local_path(target))
    try:
        path_max = os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):
        path_max = 4096
    if len(os.fsencode(full)) >= path_max:
        raise OutputPathError(f"output '{_short(target)}': the path is "
                              f"{len(os.fsencode(full))} bytes long; this system allows "
                              f"{path_max - 1}")
    parent, name = split_uri(local_path(target))
    if name in ("", ".", ".."):
        raise OutputPathError(f"output '{target}' does not name a file or directory")
    p = Path(parent or ".")
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise OutputPathError(f"output '{target}': '{p}' is not a directory")
    try:
        limit = os.pathconf(p, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    missing = Path(parent).parts[len(p.parts):] if parent and p != Path(".") else ()
    for part in (*missing, name):
        if len(part.encode()) > limit:
            raise OutputPathError(f"output '{_short(target)}': the name '{_short(part)}' is "
                                  f"{len(part.encode())} bytes long; this filesystem allows "
                                  f"{limit}")


def _short(text: str, n: int = 120) -> str:
    return text if len(text) <= n else text[:n] + "..."


def resolve_local(target: str) -> str:
    """A local output path with its directory resolved (symlinks, ``..``, ``.``).

    ``q/../q`` and ``./m/`` become one absolute path, so the temporary
    sibling, the commit and every check see the same directory. The last
    name is kept as it is: a symbolic link there is the output itself, and
    is refused rather than followed. ``file:`` URLs stay URLs.
    """
    path = local_path(target).rstrip("/") or local_path(target)
    head, name = os.path.split(path)
    if name in ("", ".", ".."):
        raise OutputPathError(f"output '{target}' does not name a file or directory")
    resolved = os.path.join(os.path.realpath(head or "."), name)
    if not str(target).startswith("file:"):
        return resolved
    # A file: URL stays one (an engine would take a bare path on its default filesystem),
    # its path as decoded: Spark's and fsspec's writers take it as written, this module
    # decodes it once more, so a '%' left after decoding would name two paths.
    if "%" in resolved:
        raise OutputPathError(f"output '{target}': its path holds '%' once decoded "
                              f"('{_short(resolved)}'); give it as a plain path")
    return "file://" + resolved


def _make_parents(fs: FileSystem, target: str) -> list[str]:
    """Create the missing parent directories; return them, deepest first."""
    parent, _ = split_uri(target)
    if not parent or not fs.local:
        if parent:
            fs.makedirs(parent)
        return []
    created = []
    p = Path(local_path(parent))
    while not os.path.lexists(p) and p != p.parent:
        created.append(str(p))
        p = p.parent
    try:
        fs.makedirs(parent)
    except OSError as exc:
        _remove_empty(created)
        raise OutputPathError(f"output '{target}': cannot create its directory: "
                              f"{exc.strerror}") from exc
    return created


def _remove_empty(created: list[str]) -> None:
    for d in created:  # deepest first; only if still empty
        try:
            os.rmdir(d)
        except OSError:
            break


@contextmanager
def publishing(fs: FileSystem, target: str, *, overwrite: bool = False,
               kind: str | None = None) -> Iterator[str]:
    """Yield a temporary sibling of ``target`` to write; commit it on success.

    The caller writes a file or a directory at the yielded path (through the
    same store). Nothing appears at ``target`` if the block raises. With
    ``overwrite``, an existing ``target`` is replaced only if it is a distcal
    output of ``kind`` ("model", "report", "parquet"; when None, the kind of
    what was written): never a device, a FIFO, a link or a foreign directory.
    """
    overwrite = check_bool(overwrite, "overwrite")
    shown = str(target)
    target = str(target).rstrip("/") or str(target)
    check_target(fs, target)
    if fs.local:
        target = resolve_local(target)
        check_target(fs, target)
    recover(fs, target)
    refuse_existing(fs, target, overwrite, kind, shown)
    created = _make_parents(fs, target)
    tmp = temp_sibling(target, "tmp")
    hold = temp_sibling(target, "tmp") if fs.local else None
    done = False
    try:
        # (Within the try: a signal right after a mkdir must not leave the directory.)
        if hold is not None:
            created += _hold_parent(fs, target, local_path(hold), shown)
        yield tmp
        check_commit()
        _commit(fs, tmp, target, overwrite, kind, shown)
        done = True
    finally:
        if fs.exists(tmp):
            fs.remove(tmp)
        if hold is not None and os.path.isdir(local_path(hold)):
            os.rmdir(local_path(hold))
        if not done:
            _remove_empty(created)


def _hold_parent(fs: FileSystem, target: str, hold: str, shown: str) -> list[str]:
    """Make the empty directory ``hold`` next to ``target`` (removed once the run ends).

    It shows that the directory takes new entries (one can exist and not: read-only,
    /proc), and it keeps the directory non-empty while this run writes: a concurrent
    run that created the parent directories and fails removes them only if empty. One
    that did so before ``hold`` was made (this run found them existing) is seen as a
    missing directory here: the parents are made again (returned, deepest first, to be
    removed if this run fails).
    """
    created: list[str] = []
    for _ in range(10):
        try:
            os.mkdir(hold)
            return created
        except OSError as exc:
            parent_there = os.path.isdir(os.path.dirname(hold) or ".")
            if not isinstance(exc, FileNotFoundError) or parent_there:  # /proc: ENOENT
                raise OutputPathError(f"output '{shown}': cannot create files in its "
                                      f"directory: {exc.strerror}") from exc
        created = _make_parents(fs, target) + created  # another run removed them
    raise OutputPathError(f"output '{shown}': its directory was removed again and again "
                          "while this run made it")


@contextmanager
def local_publishing(target: str | os.PathLike[str], *,
                     overwrite: bool = False) -> Iterator[Path]:
    """:func:`publishing` on this machine's filesystem, yielding a :class:`~pathlib.Path`."""
    from .local import LocalFileSystem

    with publishing(LocalFileSystem(), local_path(os.fspath(target)),
                    overwrite=overwrite) as tmp:
        yield Path(tmp)


@contextmanager
def publishing_dir(fs: FileSystem, target: str, *, overwrite: bool = False,
                   kind: str | None = None) -> Iterator[Path]:
    """Yield a local path at which to create a file or a directory; publish it at
    ``target`` when the block ends (:func:`publishing`; nothing if it raises).

    On a local store the path is the temporary sibling itself; on remote
    stores it is a local staging directory, copied up at the end, so the
    block can always use plain local file APIs.
    """
    with publishing(fs, target, overwrite=overwrite, kind=kind) as tmp:
        if fs.local:
            yield Path(local_path(tmp))
            return
        with tempfile.TemporaryDirectory(prefix="distcal-") as d:
            staged = Path(d) / "out"
            yield staged
            fs.put(staged, tmp)


def publish_dir(fs: FileSystem, target: str, write: Callable[[Path], None], *,
                overwrite: bool = False, kind: str | None = None) -> None:
    """Publish what ``write(local_path)`` creates (a file or a directory) at ``target``
    (:func:`publishing_dir`)."""
    with publishing_dir(fs, target, overwrite=overwrite, kind=kind) as path:
        write(path)


# How often a local directory replaced while it was read is read again.
_READ_TRIES = 10


def _identity(path: Path) -> tuple[int, int] | None:
    """The directory entry's (device, inode); None if nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def fetch_dir(fs: FileSystem, uri: str, read: Callable[[Path], T]) -> T:
    """``read(local_path)`` on ``uri``, copied to a local temporary directory if remote.

    Locally a read that fails while the directory is replaced (an overwrite
    publishes a new directory in its place, step 4 of this module) is done
    again, at most ``_READ_TRIES`` times: a read that overlaps the exchange
    sees files of both, and the old one's may be gone (the checksums refuse
    the mix). The inode of ``uri`` tells: unchanged, the failure is the
    directory's own and is raised.
    """
    if not fs.local:
        with tempfile.TemporaryDirectory(prefix="distcal-") as d:
            fs.get(uri, Path(d) / "in")
            return read(Path(d) / "in")
    path, tries_left = Path(local_path(uri)), _READ_TRIES
    while True:
        before = _identity(path)
        try:
            return read(path)
        except Exception:
            tries_left -= 1
            if not tries_left or _identity(path) == before:
                raise
            log.info("'%s' was replaced while it was read: reading it again", uri)
