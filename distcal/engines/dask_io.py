"""Dask backend of the command line and of ``jobs/dask_calibrate.py``.

Reads Parquet with ``dask.dataframe.read_parquet`` (files, directories,
hive partitions, any fsspec filesystem), runs on the cluster at
``--scheduler ADDRESS`` or on a ``LocalCluster`` started for the run and
closed after. Outputs are written aside and moved into place: a model or
report directory appears complete or not at all, and the Parquet output of
``apply`` is written by Dask under a temporary name first.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import DataError, UsageError

__all__ = ["DaskIO", "main"]


def _fs(url: str) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(str(url))


def _is_local(url: str) -> bool:
    fs, _ = _fs(url)
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def _sibling(path: str, tag: str) -> str:
    head, _, name = str(path).rstrip("/").rpartition("/")
    base = f".{name}.{tag}-{uuid.uuid4().hex[:12]}"
    return f"{head}/{base}" if head else base


class DaskIO:
    """Parquet through fsspec; the Dask engine on a distributed cluster."""

    engine = "dask"

    def __init__(self, client: Any, cluster: Any = None):
        self.client = client
        self.cluster = cluster

    @classmethod
    def local(cls, workers: int = 2, threads: int = 1) -> DaskIO:
        """A LocalCluster (worker processes) for this run."""
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=workers, threads_per_worker=threads,
                               processes=True, dashboard_address=None)
        return cls(Client(cluster), cluster)

    @classmethod
    def for_job(cls, opts: dict[str, Any]) -> DaskIO:
        if opts.get("scheduler"):
            from distributed import Client

            return cls(Client(opts["scheduler"], timeout="30s"))
        return cls.local()

    # -- inputs ---------------------------------------------------------------
    def read(self, opts: dict[str, Any]) -> Any:
        import dask.dataframe as dd

        if not opts.get("input"):
            raise UsageError("missing required option(s): --input")
        fs, root = _fs(opts["input"])
        if not fs.exists(root):
            raise DataError(f"input '{opts['input']}' does not exist")
        return dd.read_parquet(str(opts["input"]))

    # -- outputs --------------------------------------------------------------
    def output_name(self, opts: dict[str, Any]) -> str:
        if not opts.get("output"):
            raise UsageError("missing required option(s): --output")
        return str(opts["output"])

    def refuse_existing(self, target: str, overwrite: bool, table: str | None = None) -> None:
        fs, root = _fs(target)
        if fs.exists(root) and not overwrite:
            raise UsageError(f"output '{target}' exists (pass --overwrite to replace it)")

    def _publish(self, write: Callable[[Path], None], target: str, overwrite: bool) -> None:
        if _is_local(target):
            from ..io import atomic_path

            _, root = _fs(target)
            with atomic_path(root, overwrite=overwrite) as tmp:
                write(tmp)
            return
        fs, root = _fs(target)
        with tempfile.TemporaryDirectory(prefix="distcal-") as d:
            staged = Path(d) / "out"
            write(staged)
            tmp = _sibling(root, "tmp")
            fs.put(str(staged), tmp, recursive=True)
            self._swap(fs, tmp, root, overwrite)

    @staticmethod
    def _swap(fs: Any, tmp: str, root: str, overwrite: bool) -> None:
        if fs.exists(root):
            if not overwrite:
                fs.rm(tmp, recursive=True)
                raise UsageError(f"output '{root}' exists (pass --overwrite to replace it)")
            old = _sibling(root, "old")
            fs.mv(root, old, recursive=True)
            fs.mv(tmp, root, recursive=True)
            fs.rm(old, recursive=True)
        else:
            fs.mv(tmp, root, recursive=True)

    def save_model(self, model: Any, path: str, overwrite: bool) -> None:
        self._publish(lambda d: model.save(d), path, overwrite)

    def load_model(self, path: str) -> Any:
        from ..model import load

        if _is_local(path):
            return load(_fs(path)[1])
        fs, root = _fs(path)
        with tempfile.TemporaryDirectory(prefix="distcal-") as d:
            fs.get(root, str(Path(d) / "in"), recursive=True)
            return load(Path(d) / "in")

    def apply(self, model: Any, opts: dict[str, Any],
              before_commit: Callable[[Any], None] | None = None) -> int:
        """Write the calibrated table aside; ``before_commit(new_ddf)``; then move it in."""
        import dask.dataframe as dd

        out = model.transform(self.read(opts), score_col=opts["score_col"],
                              output_col=opts["output_col"])
        fs, root = _fs(self.output_name(opts))
        tmp = _sibling(root, "tmp")
        try:
            out.to_parquet(tmp if _is_local(root) else fs.unstrip_protocol(tmp),
                           write_index=False)
            written = dd.read_parquet(tmp if _is_local(root) else fs.unstrip_protocol(tmp))
            rows = int(written.shape[0].compute())
            if before_commit is not None:
                before_commit(written)
            self._swap(fs, tmp, root, opts["overwrite"])
        except BaseException:
            if fs.exists(tmp):
                fs.rm(tmp, recursive=True)
            raise
        return rows

    def write_report(self, reports: list, path: str, overwrite: bool) -> None:
        from ..report import write_report

        def write(d: Path) -> None:
            staged = Path(tempfile.mkdtemp(prefix="distcal-report-")) / "r"
            write_report(reports, staged)
            shutil.copytree(staged, d)
            shutil.rmtree(staged.parent, ignore_errors=True)

        self._publish(write, path, overwrite)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def add_scheduler_option(p: Any) -> None:
    p.add_argument("--scheduler", default=None,
                   help="address of a running Dask scheduler (default: a LocalCluster)")


def main(argv: Sequence[str] | None = None) -> int:
    from ..cli import run

    return run(argv, prog="dask_calibrate", io_factory=DaskIO.for_job,
               extra=add_scheduler_option)
