"""Per-segment ranges of a Dask DataFrame: a range shuffle by score carrying the keys.

The pipeline of :class:`~distcal.engines.dask.DaskRanges` with the ``by``
columns riding along: every input partition is validated (the same rules
and messages) and sorted by score, evenly spaced samples give the range
bounds, each sorted partition is cut at the bounds by binary search, and
range i gathers the i-th slice of every partition. Each range is then
pooled once by score and by (segment, score) (:mod:`distcal.core.segments`)
and persisted, so every pass maps over small pooled tables. Rows travel
raw: pooling by (segment, score) before the shuffle pays only when scores
repeat within segments. The number of tasks depends on the partitions and
ranges, never on the number of segments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ..core.distinct import DistinctTable
from ..core.partition import add_up, range_bounds
from ..core.segments import SegmentTables, check_rows, pool_range, value_roles
from ..logs import log, phase
from ..tables import ColumnSource
from .local_segments import key_columns_of

__all__ = ["DaskSegmentRanges"]

Part = tuple[dict[str, np.ndarray], list[pd.Series]]


def _valid_sorted(pdf: pd.DataFrame, columns: dict[str, str], by: list[str],
                  finite_scores: bool) -> tuple[Part, dict[str, Any]]:
    """One partition's valid rows with weight > 0, sorted by score, and its counts."""
    arrays, text = next(ColumnSource(pdf, columns).batches())
    keep, stats = check_rows(arrays, text, columns, finite_scores)
    keys = [k.reset_index(drop=True) for k in key_columns_of(pdf, by)]
    if keep is not None:
        arrays = {r: a[keep] for r, a in arrays.items()}
        keys = [k[keep].reset_index(drop=True) for k in keys]
    order = np.argsort(arrays[value_roles(columns)[0]], kind="stable")
    return ({r: a[order] for r, a in arrays.items()},
            [k.iloc[order].reset_index(drop=True) for k in keys]), stats


def _stats_and_sample(pair: tuple[Part, dict[str, Any]], size: int
                      ) -> tuple[dict[str, Any], np.ndarray, int]:
    (arrays, _), stats = pair
    s = arrays[value_roles(arrays)[0]]
    if not s.shape[0]:
        return stats, np.zeros(0), 0
    idx = np.linspace(0, s.shape[0] - 1, min(size, s.shape[0])).astype(np.intp)
    return stats, s[idx], int(s.shape[0])


def _cut(pair: tuple[Part, dict[str, Any]], bounds: np.ndarray) -> list[Part]:
    (arrays, keys), _ = pair
    s = arrays[value_roles(arrays)[0]]
    cuts = np.concatenate(([0], np.searchsorted(s, bounds, side="left"), [s.shape[0]]))
    return [({r: a[lo:hi] for r, a in arrays.items()}, [k.iloc[lo:hi] for k in keys])
            for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist())]


def _pool(slices: list[Part], n_keys: int) -> tuple[DistinctTable, SegmentTables | None]:
    arrays = {r: np.concatenate([a[r] for a, _ in slices]) for r in slices[0][0]}
    keys = [pd.concat([k[j] for _, k in slices], ignore_index=True) for j in range(n_keys)]
    value, target = value_roles(arrays)
    return pool_range(arrays[value], arrays[target], arrays.get("weight"), keys,
                      with_wyy=value == "prob")


def _apply(fn: Callable[..., Any], pooled: tuple[DistinctTable, SegmentTables | None],
           segments: bool) -> Any:
    table, segs = pooled
    if not len(table):
        return None
    return fn(table, segs) if segments else fn(table)


class DaskSegmentRanges:
    """Score ranges of a Dask DataFrame with the segment keys (see ``SegmentRanges``)."""

    def __init__(self, ddf: Any, columns: dict[str, str | None], by: list[str], *,
                 on_invalid: str = "raise", finite_scores: bool = False, passes: int = 1,
                 n_ranges: int | None = None, samples_per_range: int = 64):
        import dask
        from dask import delayed

        from ..errors import column_not_found

        self.columns = {r: c for r, c in columns.items() if c is not None}
        self.on_invalid, self.finite_scores = on_invalid, finite_scores
        for name in by:
            if name not in ddf.columns:
                raise column_not_found(name, "segment", list(ddf.columns))
        ColumnSource(ddf._meta, self.columns)  # the columns' types, from the meta
        names = list(dict.fromkeys([*self.columns.values(), *by]))
        parts = ddf[names].to_delayed(optimize_graph=True)
        k = int(n_ranges or 8)  # the engine passes its default
        log.info("dask: %d input partitions, %d ranges, segments by %s", len(parts), k, by)
        valid = [delayed(_valid_sorted, pure=True)(p, self.columns, by, finite_scores)
                 for p in parts]
        (valid,) = dask.persist(valid)
        info = dask.compute(*[delayed(_stats_and_sample)(v, samples_per_range * k)
                              for v in valid])
        totals = add_up([st for st, _, _ in info], self.columns, on_invalid=on_invalid,
                        finite_scores=finite_scores)
        self.n_rows, self.weight_total = totals.n_rows, totals.weight_total
        self.dropped_rows, self.sum_wyy = totals.dropped_rows, totals.sum_wyy
        bounds = range_bounds([(smp, n) for _, smp, n in info if n], k)
        pieces = [delayed(_cut, pure=True, nout=len(bounds) + 1)(v, bounds) for v in valid]
        ranges = [delayed(_pool, pure=True)([piece[i] for piece in pieces], len(by))
                  for i in range(len(bounds) + 1)]
        (self.ranges,) = dask.persist(ranges)
        del valid
        self._ddf, self._by = ddf, by

    def _run(self, fn: Callable[..., Any], segments: bool) -> list[Any]:
        import dask
        from dask import delayed

        with phase("dask: one pass over the ranges%s", " with segments" if segments else ""):
            results = dask.compute(*[delayed(_apply)(fn, r, segments) for r in self.ranges])
        return [r for r in results if r is not None]

    def map(self, fn: Callable[[DistinctTable], Any]) -> list[Any]:
        return self._run(fn, False)

    def map_segments(self, fn: Callable[[DistinctTable, SegmentTables], Any]) -> list[Any]:
        return self._run(fn, True)

    def spearman_rows(self) -> bool:
        """Sign of Spearman's rho over the valid rows (brings score and label to the client)."""
        from scipy.stats import spearmanr

        from .local import valid_batches

        log.warning("dask: increasing='auto' with labels that are not all 0/1 brings the "
                    "score and label columns to the client (Spearman's rho needs the rows)")
        pdf = self._ddf[list(dict.fromkeys(self.columns.values()))].compute()
        columns: dict[str, str | None] = dict(self.columns)
        arrays = list(valid_batches(pdf, columns, on_invalid=self.on_invalid))[0]
        return not (spearmanr(arrays["score"], arrays["label"]).statistic < 0)

    def close(self) -> None:
        self.ranges = []

    def __enter__(self) -> DaskSegmentRanges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
