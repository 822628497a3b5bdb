"""The local engine: this process, in-memory frames or Parquet read in batches.

The same pipeline as the cluster engines with the shuffle done in one
process: each record batch is validated and pooled by distinct score
(map-side combine), the pooled tables are merged, spilling sorted runs to
disk past a memory budget (:class:`~distcal.core.store.TableStore`), and
the methods run over the ordered score ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.distinct import DistinctTable, pool_ties
from ..core.keyed import KeySpec
from ..core.store import TableStore
from ..core.validate import RowChecker
from ..errors import DataError, column_not_found, output_column_exists
from ..logs import describe_input, log, phase
from ..tables import ColumnSource, is_path, open_source, read_table
from .base import ReportFn
from .frames import refuse_cluster_frames

__all__ = ["Summary", "summarise", "LocalRanges", "LocalEngine", "valid_batches"]


@dataclass
class Summary:
    stores: dict[str, TableStore]  # one per value role ("score", "prob" or "prob:NAME")
    n_rows: int
    weight_total: float
    dropped_rows: int
    sum_wyy: float = float("nan")  # sum of w * y^2 (Brier score), when asked for

    @property
    def store(self) -> TableStore:
        (only,) = self.stores.values()
        return only

    def close(self) -> None:
        for st in self.stores.values():
            st.close()


def value_roles(columns: dict[str, str | None]) -> list[str]:
    return [r for r in columns if r in ("score", "prob") or r.startswith("prob:")]


def valid_batches(data: Any, columns: dict[str, str | None], *, on_invalid: str = "raise",
                  finite_scores: bool = False, batch_rows: int = 1 << 22,
                  indexes: dict[str, int] | None = None):
    """Yield validated batches (role -> float64 array) with weight > 0 rows only.

    Problems are counted over the whole input; with ``on_invalid="raise"``
    the :class:`DataError` comes after the last batch, so its counts are
    totals. Callers must not write anything before the generator finishes.
    The generator's return value is the checker (for the dropped count).
    ``indexes`` (role -> element) reads vector columns (``score_index``).
    """
    source = open_source(data, columns, indexes)
    checker = RowChecker(source.columns, finite_scores=finite_scores)
    for arrays, text in source.batches(batch_rows):
        ok = checker.check(arrays, text)
        if checker.problems and on_invalid == "raise":
            continue  # keep counting; raise at the end
        if ok is not None:
            arrays = {k: v[ok] for k, v in arrays.items()}
        w = arrays.get("weight")
        if w is not None:
            keep = w > 0
            if not keep.all():
                arrays = {k: v[keep] for k, v in arrays.items()}
        yield arrays
    checker.raise_if_invalid(on_invalid)
    return checker


def summarise(data: Any, columns: dict[str, str | None], *, on_invalid: str = "raise",
              finite_scores: bool = False, memory_rows: int = 1 << 23,
              batch_rows: int = 1 << 22, chunk_rows: int = 1 << 24,
              indexes: dict[str, int] | None = None) -> Summary:
    """Distinct-value tables of the valid rows with weight > 0, in one read.

    ``columns`` maps roles to column names: the values ordered by ("score",
    "prob", or several "prob:NAME" to evaluate columns together), "label"
    or "loss" (summed as positives), "weight". A row with a problem in any
    column is invalid for all. Validated batches are gathered up to
    ``chunk_rows`` rows and pooled in one call (one sort beats merging many
    small tables); the pooled chunks go to a :class:`TableStore` per value
    column, which spills past ``memory_rows`` distinct values. With
    probability columns the sum of w y^2 is kept for the Brier score.
    """
    roles = value_roles(columns)
    label_role = "loss" if "loss" in columns else "label"
    stores = {r: TableStore(memory_rows=memory_rows) for r in roles}
    n_rows, weight_total, sum_wyy = 0, 0.0, 0.0
    chunk: list[dict[str, np.ndarray]] = []
    chunk_len = 0

    def flush() -> None:
        nonlocal chunk, chunk_len
        if chunk_len:
            cat = {k: np.concatenate([c[k] for c in chunk]) if len(chunk) > 1 else chunk[0][k]
                   for k in chunk[0]}
            for r in roles:
                stores[r].add(pool_ties(cat[r], cat[label_role], cat.get("weight")))
        chunk, chunk_len = [], 0

    gen = valid_batches(data, columns, on_invalid=on_invalid, finite_scores=finite_scores,
                        batch_rows=batch_rows, indexes=indexes)
    try:
        while True:
            try:
                arrays = next(gen)
            except StopIteration as stop:
                checker = stop.value
                break
            k = arrays[roles[0]].shape[0]
            if not k:
                continue
            w = arrays.get("weight")
            n_rows += k
            weight_total += float(w.sum()) if w is not None else k
            if roles[0] != "score":
                y = arrays[label_role]
                sum_wyy += float(np.dot(y * w, y) if w is not None else np.dot(y, y))
            if chunk_len + k > chunk_rows:
                flush()
            chunk.append(arrays)
            chunk_len += k
        flush()
    except BaseException:
        for st in stores.values():
            st.close()
        raise
    if n_rows == 0:
        for st in stores.values():
            st.close()
        raise DataError(f"no rows with weight > 0 to use ({checker.rows_seen} rows read, "
                        f"{checker.rows_invalid} invalid)")
    return Summary(stores, n_rows, weight_total, checker.rows_invalid,
                   sum_wyy if roles[0] != "score" else float("nan"))


class LocalRanges:
    """The ordered ranges of one value column of a local input (see ``MapRanges``)."""

    def __init__(self, data: Any, columns: dict[str, str | None], summary: Summary,
                 role: str, on_invalid: str, indexes: dict[str, int] | None = None):
        self.data, self.columns, self.on_invalid = data, columns, on_invalid
        self.indexes = indexes
        self.summary, self.role = summary, role
        self.n_rows = summary.n_rows
        self.weight_total = summary.weight_total
        self.dropped_rows = summary.dropped_rows
        self.sum_wyy = summary.sum_wyy

    def map(self, fn: Callable[[DistinctTable], Any]) -> list[Any]:
        return [fn(t) for t in self.summary.stores[self.role].ranges()]

    def spearman_rows(self) -> bool:
        return spearman_rows(self.data, self.columns, self.on_invalid, self.indexes)

    def close(self) -> None:
        self.summary.stores[self.role].close()

    def __enter__(self) -> LocalRanges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



class LocalEngine:
    """The local engine (see the module docstring); implements :class:`~.base.Engine`."""

    name = "local"
    options = frozenset({"memory_rows", "batch_rows", "chunk_rows"})

    def open_ranges(self, data: Any, columns: dict[str, str | None], *,
                    on_invalid: str = "raise", finite_scores: bool = False, passes: int = 1,
                    score_index: int | None = None, **opts: Any) -> LocalRanges:
        """Validate and summarise ``data``; the result maps functions over score ranges.

        ``passes`` (how often the caller will map) matters to cluster engines,
        which cache between passes; locally the summary is kept either way.
        ``score_index``: the value column holds vectors; use this element.
        """
        refuse_cluster_frames(data)
        role = value_roles(columns)[0]
        indexes = None if score_index is None else {role: score_index}
        with phase("local: read, validate and pool %s", describe_input(data)):
            summary = summarise(data, columns, on_invalid=on_invalid,
                                finite_scores=finite_scores, indexes=indexes, **opts)
        _log_summary(summary)
        return LocalRanges(data, columns, summary, role, on_invalid, indexes)

    def evaluate_many(self, data: Any, columns: dict[str, str | None], prob_cols: list[str],
                      *, on_invalid: str, report: ReportFn, **opts: Any) -> dict[str, Any]:
        """One read of ``data`` for all "prob:NAME" columns, then one report per column."""
        refuse_cluster_frames(data)
        with phase("local: read, validate and pool %s", describe_input(data)):
            summary = summarise(data, columns, on_invalid=on_invalid, **opts)
        _log_summary(summary)
        try:
            return {c: report(LocalRanges(data, columns, summary, f"prob:{c}", on_invalid), c)
                    for c in prob_cols}
        finally:
            summary.close()

    def transform(self, model: Any, data: Any, score_col: str, output_col: str,
                  score_index: int | None = None) -> Any:
        """pandas in, pandas out; pyarrow in, pyarrow out; a Parquet path in, pandas out."""
        indexes = None if score_index is None else {"score": score_index}
        if is_path(data):
            data = read_table(data).to_pandas()
        if isinstance(data, pd.DataFrame):
            if score_col not in data.columns:
                raise column_not_found(score_col, "score", map(str, data.columns))
            values, text = ColumnSource(data, {"score": score_col}, indexes).batches().__next__()
            _refuse_text(text, score_col)
            if output_col in data.columns:
                raise output_column_exists(output_col)
            out = data.copy(deep=False)
            out[output_col] = model.predict(values["score"])
            return out
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            if score_col not in data.schema.names:
                raise column_not_found(score_col, "score", data.schema.names)
            values, text = ColumnSource(data, {"score": score_col}, indexes).batches().__next__()
            _refuse_text(text, score_col)
            if output_col in data.schema.names:
                raise output_column_exists(output_col)
            col = pa.array(model.predict(values["score"]), type=pa.float64())
            if isinstance(data, pa.RecordBatch):
                data = pa.Table.from_batches([data])
            return data.append_column(output_col, col)
        raise TypeError(f"cannot transform data of type {type(data).__name__}")


    def is_vector_column(self, data: Any, name: str) -> bool:
        """A pyarrow list column, or a pandas column of lists or arrays (first value)."""
        from ..tables import is_vector_column

        return is_vector_column(data, name)

    def open_keyed(self, data: Any, spec: KeySpec, *, on_invalid: str = "raise",
                   finite_scores: bool = False, passes: int = 1, **opts: Any) -> Any:
        """The keyed rows of a local input, streamed in batches (:mod:`.local_keyed`).

        Options: ``memory_rows`` (distinct (key, score) pairs held before
        spilling sorted runs to disk), ``batch_rows`` (rows read at a time);
        ``chunk_rows`` is accepted for the binary fit's sake.
        """
        from .local_keyed import LocalKeyedRanges

        return LocalKeyedRanges(data, spec, on_invalid=on_invalid, finite_scores=finite_scores,
                                **opts)

    def transform_rows(self, data: Any, columns: list[str], output_col: str,
                       predict: Callable[[Any], Any], vector: bool, model: Any = None) -> Any:
        """pandas in, pandas out; pyarrow in, pyarrow out; a Parquet path in, pandas out."""
        from .local_keyed import transform_rows

        return transform_rows(data, columns, output_col, predict, vector)


def _refuse_text(text: dict[str, np.ndarray], score_col: str) -> None:
    k = int(np.count_nonzero(text["score"])) if "score" in text else 0
    if k:
        raise DataError(f"column '{score_col}': {k} row{'s' if k > 1 else ''} "
                        f"{'are' if k > 1 else 'is'} text, not numbers")


def _log_summary(summary: Summary) -> None:
    log.info("local: %d rows used (weight %g), %d dropped; %s distinct values%s",
             summary.n_rows, summary.weight_total, summary.dropped_rows,
             ", ".join(f"{r}: {st.n_distinct_upper}" for r, st in summary.stores.items()),
             " (spilled to disk)" if any(st.spilled for st in summary.stores.values()) else "")


def spearman_rows(data: Any, columns: dict[str, str | None], on_invalid: str,
                  indexes: dict[str, int] | None = None) -> bool:
    """Sign of Spearman's rho over rows (labels that are not all 0/1)."""
    from scipy.stats import spearmanr

    parts = list(valid_batches(data, columns, on_invalid=on_invalid, indexes=indexes))
    s = np.concatenate([p["score"] for p in parts])
    y = np.concatenate([p["label"] for p in parts])
    rho = spearmanr(s, y).statistic
    return not (rho < 0)
