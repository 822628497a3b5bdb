"""The Dask backend, and the job ``jobs/dask_calibrate.py SUBCOMMAND ... [--scheduler ADDR]``.

Reads Parquet with ``dask.dataframe.read_parquet`` (files, directories,
hive partitions, any fsspec filesystem), runs on the cluster at
``--scheduler ADDRESS`` or on a ``LocalCluster`` started for the run
(worker processes on 127.0.0.1, no dashboard) and closed after. Outputs go
through :mod:`distcal.storage`: the calibrated Parquet is written by Dask
under a temporary sibling name and committed into place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import DataError, UsageError
from ..model import CalibrationModel
from ..storage import PARQUET, publishing
from .backend import Backend, transform_for_cli
from .run import run

__all__ = ["DaskBackend", "main"]


class DaskBackend(Backend):
    """Parquet through fsspec; the Dask engine on a distributed cluster."""

    engine = "dask"

    def __init__(self, client: Any, cluster: Any = None):
        self.client = client
        self.cluster = cluster

    @classmethod
    def local(cls, opts: dict[str, Any] | None = None) -> DaskBackend:
        """A LocalCluster of worker processes for this run, on loopback, no dashboard."""
        from distributed import Client, LocalCluster

        # dashboard_address=None still starts the scheduler's HTTP routes (health,
        # metrics) on port 8787: a random loopback port instead, and no dashboard.
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               host="127.0.0.1", dashboard_address=None,
                               scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
        return cls(Client(cluster), cluster)

    @classmethod
    def for_job(cls, opts: dict[str, Any]) -> DaskBackend:
        if opts.get("scheduler"):
            from distributed import Client

            return cls(Client(opts["scheduler"], timeout="30s"))
        return cls.local(opts)

    def read(self, opts: dict[str, Any]) -> Any:
        import dask.dataframe as dd

        if not opts.get("input"):
            raise UsageError("missing required option(s): --input")
        if not self.filesystem(opts["input"]).exists(opts["input"]):
            raise DataError(f"input '{opts['input']}' does not exist")
        return dd.read_parquet(str(opts["input"]))

    def apply(self, model: CalibrationModel, opts: dict[str, Any],
              before_commit: Callable[[Any], None] | None = None) -> int:
        """Write the calibrated table aside; ``before_commit(new_ddf)``; then commit it."""
        import dask.dataframe as dd

        out = transform_for_cli(model, self.read(opts), opts)
        target = self.output_name(opts)
        fs = self.filesystem(target)
        with publishing(fs, target, overwrite=opts["overwrite"], kind=PARQUET) as tmp:
            out.to_parquet(tmp, write_index=False,
                           schema=self._object_column_types(opts, out, model))
            written = dd.read_parquet(tmp)
            rows = int(written.shape[0].compute())
            if before_commit is not None:
                before_commit(written)
        return rows

    @staticmethod
    def _object_column_types(opts: dict[str, Any], out: Any, model: Any) -> dict[str, Any]:
        """The Arrow types of ``out``'s object columns, which Dask's ``to_parquet`` would
        write as text (it infers them from a meta of strings): an input column's type
        from the input dataset's schema (lists, structs, decimals), and a multiclass
        model's probabilities ``list<double>``."""
        import fsspec
        import pandas as pd
        import pyarrow as pa
        import pyarrow.dataset as ds

        from ..core.piecewise import is_keyed

        objects = [str(c) for c, t in out.dtypes.items() if pd.api.types.is_object_dtype(t)]
        fs, path = fsspec.core.url_to_fs(str(opts["input"]))
        schema = ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive").schema
        types = {c: schema.field(c).type for c in objects if c in schema.names}
        if is_keyed(model) and model.n_classes >= 2:
            types[opts["output_col"]] = pa.list_(pa.float64())
        return types

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def main(argv: Sequence[str] | None = None, *, process: bool = False) -> int:
    """Entry point of ``jobs/dask_calibrate.py`` (``process``: :func:`.run.run`)."""
    return run(argv, prog="dask_calibrate", entry_point="dask",
               backend_factory=DaskBackend.for_job, process=process)
