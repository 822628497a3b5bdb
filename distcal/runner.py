"""Where the command line reads and writes, per engine: the local backend.

The commands of :mod:`distcal.cli` are written once against this small
interface (``read``, ``save_model``, ``load_model``, ``apply``,
``write_report``, ``refuse_existing``, ``output_name``); the Spark job
(:mod:`distcal.spark.job`) and the Dask job give their own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import UsageError

__all__ = ["LocalIO"]


class LocalIO:
    """Parquet files and directories on this machine; the local engine."""

    engine = "local"

    def read(self, opts: dict[str, Any]) -> Any:
        if not opts.get("input"):
            raise UsageError("missing required option(s): --input")
        return opts["input"]

    def output_name(self, opts: dict[str, Any]) -> str:
        if not opts.get("output"):
            raise UsageError("missing required option(s): --output")
        return str(opts["output"])

    def refuse_existing(self, target: str, overwrite: bool, table: str | None = None) -> None:
        if Path(target).exists() and not overwrite:
            raise UsageError(f"output '{target}' exists (pass --overwrite to replace it)")

    def save_model(self, model: Any, path: str, overwrite: bool) -> None:
        model.save(path, overwrite=overwrite)

    def load_model(self, path: str) -> Any:
        from .model import load

        return load(path)

    def apply(self, model: Any, opts: dict[str, Any],
              before_commit: Callable[[Any], None] | None = None) -> int:
        """Write the calibrated table; ``before_commit(new_data)`` runs before it is published."""
        from .apply import apply_to_parquet

        return apply_to_parquet(model, self.read(opts), self.output_name(opts),
                                score_col=opts["score_col"], output_col=opts["output_col"],
                                overwrite=opts["overwrite"],
                                before_commit=(lambda p: before_commit(str(p)))
                                if before_commit else None)

    def write_report(self, reports: list, path: str, overwrite: bool) -> None:
        from .report import write_report

        write_report(reports, path, overwrite=overwrite)

    def close(self) -> None:
        pass
