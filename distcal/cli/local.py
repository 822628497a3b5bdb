"""The local backend: Parquet files and directories of this machine, the local engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from ..model import CalibrationModel
from .backend import Backend, column_list, interval_columns

__all__ = ["LocalBackend"]


class LocalBackend(Backend):
    """Reads Parquet in bounded memory; writes one Parquet file for ``apply``."""

    engine = "local"

    def read(self, opts: dict[str, Any]) -> Any:
        if not opts.get("input"):
            raise UsageError("missing required option(s): --input")
        return opts["input"]

    def column_names(self, data: Any) -> list[str]:
        from ..tables import open_dataset

        return list(open_dataset(data).schema.names)

    def apply(self, model: CalibrationModel, opts: dict[str, Any],
              before_commit: Callable[[Any], None] | None = None) -> int:
        from ..apply import apply_to_parquet

        return apply_to_parquet(model, self.read(opts), self.output_name(opts),
                                score_col=opts["score_col"], output_col=opts["output_col"],
                                score_index=opts.get("score_index"),
                                score_cols=column_list(opts.get("score_cols"), "score-cols"),
                                interval_cols=interval_columns(opts.get("interval_cols")),
                                overwrite=opts["overwrite"], before_commit=before_commit)
