"""Keyed ranges of a Dask DataFrame: one range shuffle on score, carrying the key.

Every variant of a fit (a binary score, one-vs-rest classes, ``by=``
segments, both) is a set of keyed binary problems (:mod:`distcal.core.keyed`).
On a Dask DataFrame, with whatever scheduler is in scope:

1. Map: each input partition is read with :func:`~distcal.core.rows.read_rows`
   (the checks and messages of every engine), its valid rows exploded into
   keyed rows and pooled by (key, score) (:func:`~distcal.core.keyed.pool_keyed`;
   one class at a time, so a partition never holds more than two keyed rows
   per input row). The pooled tables stay on the workers (persisted); keys
   are plain tuples, so partitions share no code book.
2. Validation: each partition's counts (a few numbers) come to the client,
   where :func:`~distcal.core.rows.add_up_rows` raises the input's
   ``DataError`` before anything else is computed.
3. Ranges: their number is chosen from the data (:func:`n_ranges_for`): the
   partitions' pooled (key, score) rows over ``range_rows``, at least two per
   worker thread. Bounds on score come from evenly spaced samples of the
   partitions' pooled runs, sorted by score (:func:`~distcal.core.keyed.range_bounds`),
   each partition's positions shifted by a different fraction of their
   spacing (partitions alike give different quantiles, so few samples each
   still make as many bounds as ranges).
4. Shuffle: each partition's table is cut at the bounds
   (:func:`~distcal.core.keyed.cut_keyed`); range i merges the i-th slice of
   every partition (:func:`~distcal.core.keyed.merge_keyed`) and ``fn`` runs
   where it is. Only ``fn``'s results come back, in ascending score order.

Memory: a worker holds one input partition while reading it (its rows and
at most two keyed rows per row: the global and the segment key of one
class), the pooled tables of its partitions (once cut at the bounds, their
slices instead), and, per range, the slices it merges: about ``range_rows``
pooled rows at most (sampled bounds: within a small factor), never raw
rows. Merging pools by (key, score) with one sort, about 150 bytes per pooled
row at its peak, so the default budget (2e6) asks for ~300 MB per range;
lower it for smaller workers. Nothing here grows with
the rows of the input, only with its partitions' distinct (key, score) pairs.
Measured (tests/test_dask_keyed.py, 1.6e7 rows, global + 20 segments, 128
partitions, 2 workers, ``range_rows=200_000``): peak worker RSS 469-494 MB,
about 330 MB of it the worker, its imports and numba's compiler; the path
before keys (raw rows per range) exceeded a 650 MB limit on the same data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import pandas as pd

from ..core.keyed import (
    Key,
    KeyedTable,
    KeySpec,
    cut_keyed,
    merge_keyed,
    pool_rows,
    range_bounds,
    sorted_sample,
)
from ..core.rows import RowPart, check_columns, count_classes, read_rows, vector_lengths
from ..logs import log, phase
from ..params import check_int
from .base import KeyedRanges, check_transform_columns, with_prediction

__all__ = ["DaskKeyedRanges", "DEFAULT_RANGE_ROWS", "n_ranges_for", "transform_rows"]

# Pooled (key, score) rows a range may merge: the engine option ``range_rows``. The
# Spark engine's option of that name counts the estimated distinct pairs of each keyed
# row's own key (200,000); here the count is what a merge concatenates, every key's
# slices of every partition, at ~150 B per row at the merge's peak (module docstring).
DEFAULT_RANGE_ROWS = 2_000_000


def n_ranges_for(pooled_rows: int, range_rows: int, threads: int, at_least: int = 1) -> int:
    """How many score ranges: the one rule of the Dask engine.

    ``pooled_rows`` is the sum of the partitions' pooled (key, score) rows:
    what the ranges' merges concatenate, an upper bound of the distinct
    pairs. Enough ranges that each merges about ``range_rows`` of them at
    most, and at least two per worker thread (every thread has work) and
    ``at_least`` (the option ``n_ranges``: more ranges, never fewer).
    """
    if range_rows < 1:
        raise ValueError(f"range_rows must be a positive number of rows, got {range_rows}")
    return max(1, at_least, 2 * threads, math.ceil(pooled_rows / range_rows))


def workers_threads() -> int:
    """Threads of the workers of the default distributed client (else this machine's CPUs)."""
    try:
        from distributed import default_client

        return sum(default_client().nthreads().values())
    except (ImportError, ValueError):
        import os

        return os.cpu_count() or 2


# -- tasks (module functions: shipped to the workers by reference) ------------------

def _lengths(pdf: pd.DataFrame, name: str) -> np.ndarray:
    return vector_lengths(pdf, name) if len(pdf) else np.zeros(1, dtype=np.int64)


def _read_pool(pdf: pd.DataFrame, spec: KeySpec, finite_scores: bool, length: int | None,
               classes: list[int | None]) -> tuple[KeyedTable, dict[str, Any]]:
    rows, stats = read_rows(pdf, spec, finite_scores=finite_scores, n_classes=length)
    return pool_rows(rows, classes, spec.pool_squares, spec.pool_magnitudes), stats


def _stats_and_size(pair: tuple[Any, dict[str, Any]]) -> tuple[dict[str, Any], int]:
    part, stats = pair
    return stats, len(part.table) if isinstance(part, KeyedTable) else part.n_rows


def _sample(pair: tuple[KeyedTable, dict[str, Any]], size: int, offset: float
            ) -> tuple[np.ndarray, int]:
    """``size`` evenly spaced scores of a pooled table's sorted scores (all keys), and its
    length. ``offset`` in [0, 1) shifts the positions by a fraction of their spacing, so
    that partitions alike in distribution still contribute different quantiles."""
    score = np.sort(pair[0].table.score)
    return sorted_sample(score, size, offset), score.shape[0]


def _cut(pair: tuple[KeyedTable, dict[str, Any]], bounds: np.ndarray) -> list[KeyedTable]:
    return cut_keyed(pair[0], bounds)


def _apply(fn: Callable[[KeyedTable], Any], table: KeyedTable) -> Any:
    return fn(table) if len(table.table) else None


def _only(table: KeyedTable, wanted: set[Key]) -> KeyedTable:
    return table.only(wanted)


def _counted_apply_rows(fn: Callable[[RowPart], Any], pair: tuple[RowPart, dict[str, Any]]
                        ) -> tuple[dict[str, Any], Any]:
    """A row part's counts, and ``fn`` of its valid rows (None without any)."""
    part, stats = pair
    return stats, fn(part) if part.n_rows else None


# -- the ranges ----------------------------------------------------------------------

class DaskKeyedRanges(KeyedRanges):
    """The keyed rows of a Dask DataFrame (implements ``KeyedRanges``; module docstring).

    Options: ``range_rows`` (pooled (key, score) rows per range, default
    :data:`DEFAULT_RANGE_ROWS`), ``n_ranges`` (at least this many ranges;
    the budget may ask for more), ``samples_per_range`` (score samples per
    range for the bounds, shared by the partitions in proportion to their
    pooled rows, default 64: what comes to the client is ~64 numbers per
    range, whatever the number of partitions).
    """

    def __init__(self, ddf: Any, spec: KeySpec, *, on_invalid: str = "raise",
                 finite_scores: bool = False, passes: int = 1,
                 range_rows: int = DEFAULT_RANGE_ROWS, n_ranges: int | None = None,
                 samples_per_range: int = 64):
        if on_invalid not in ("raise", "drop"):
            raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
        self._options(spec, on_invalid, finite_scores, passes, range_rows, n_ranges,
                      samples_per_range)
        check_columns([str(c) for c in ddf.columns], spec)
        self._parts = ddf[spec.columns].to_delayed(optimize_graph=True)
        # K, and the vectors' length, counted over the whole input (read_rows needs it).
        self.n_classes, self._length = count_classes(spec, self._vector_lengths)
        self._classes = spec.classes(self.n_classes)
        log.info("dask: keyed rows of %d partitions, K = %d, by %s", len(self._parts),
                 self.n_classes, list(spec.by))

    def _options(self, spec: KeySpec, on_invalid: str, finite_scores: bool, passes: int,
                 range_rows: int, n_ranges: int | None, samples_per_range: int) -> None:
        """The options (class docstring) kept, nothing computed yet."""
        self.spec, self.on_invalid, self.finite_scores = spec, on_invalid, finite_scores
        self.passes = passes
        self.range_rows = check_int(range_rows, 1, math.inf,
                                    "range_rows must be a positive number of rows")
        self.min_ranges = 1 if n_ranges is None else check_int(
            n_ranges, 1, math.inf, "n_ranges must be None or an integer >= 1")
        self.samples_per_range = check_int(samples_per_range, 1, math.inf,
                                           "samples_per_range must be an integer >= 1")
        self._checked = False
        self._pooled: list[Any] | None = None   # per partition: (KeyedTable, stats), persisted
        self._pieces: list[Any] | None = None   # per partition: its table's slices, persisted
        self._ranges: list[Any] | None = None   # per range: a KeyedTable (delayed)
        self._rows: list[Any] | None = None     # per partition: (RowPart, stats)

    def _vector_lengths(self) -> tuple[np.ndarray, ...]:
        """The vector score column's lengths, counted per partition (``count_classes``)."""
        import dask
        from dask import delayed

        with phase("dask: vector lengths"):
            return dask.compute(*[delayed(_lengths)(p, self.spec.score_col)
                                  for p in self._parts])

    # -- validation --------------------------------------------------------------

    def _check(self, parts: list[Any]) -> list[int]:
        """Add the parts' counts up (the input's DataError); each part's size."""
        import dask
        from dask import delayed

        info = dask.compute(*[delayed(_stats_and_size)(p) for p in parts])
        if not self._checked:
            self.add_up([st for st, _ in info], self.on_invalid, "dask")
            self._checked = True
        return [n for _, n in info]

    # -- keyed ranges --------------------------------------------------------------

    def _build(self) -> list[Any]:
        import dask
        from dask import delayed

        if self._ranges is not None:
            return self._ranges
        if self._pooled is None:
            pooled = [delayed(_read_pool, pure=True)(p, self.spec, self.finite_scores,
                                                      self._length, self._classes)
                      for p in self._parts]
            with phase("dask: reading and pooling the partitions by (key, score)"):
                (self._pooled,) = dask.persist(pooled)
        sizes = self._check(self._pooled)
        k = n_ranges_for(sum(sizes), self.range_rows, workers_threads(), self.min_ranges)
        live = [(p, n) for p, n in zip(self._pooled, sizes) if n]
        # samples_per_range per range in all, shared by the partitions as their sizes.
        budget, total = self.samples_per_range * k, sum(sizes)
        samples = dask.compute(*[delayed(_sample)(p, max(2, -(-budget * n // total)),
                                                  (i * 0.6180339887498949) % 1.0)
                                 for i, (p, n) in enumerate(live)])
        bounds = range_bounds([(smp, n) for smp, n in samples if n], k)
        log.info("dask: %d pooled (key, score) rows in %d partitions, %d ranges "
                 "(range_rows %d)", sum(sizes), len(sizes), len(bounds) + 1, self.range_rows)
        # The partitions' tables, cut at the bounds, replace them: a worker never
        # holds a partition's table and its slices at once beyond the cut itself.
        (self._pieces,) = dask.persist([delayed(_cut, pure=True, nout=len(bounds) + 1)(
            p, bounds) for p, _ in live])
        self._pooled = None
        ranges = [delayed(merge_keyed, pure=True)([piece[i] for piece in self._pieces])
                  for i in range(len(bounds) + 1)]
        if self.passes > 1:  # kept where they were merged; the slices are released
            (ranges,) = dask.persist(ranges)
            self._pieces = None
        # (One pass: the merges run inside the pass, from the slices.)
        self._ranges = ranges
        return ranges

    def map(self, fn: Callable[[KeyedTable], Any]) -> list[Any]:
        import dask
        from dask import delayed

        ranges = self._build()
        with phase("dask: one pass over the keyed ranges"):
            results = dask.compute(*[delayed(_apply)(fn, r) for r in ranges])
        return [r for r in results if r is not None]

    def narrow(self, keys: Collection[Key]) -> None:
        if self._ranges is None or self.passes <= 1:  # (one pass: nothing kept)
            return
        import dask
        from dask import delayed

        wanted = set(keys)
        (self._ranges,) = dask.persist([delayed(_only, pure=True)(r, wanted)
                                        for r in self._ranges])
        log.info("dask: later passes read the rows of %d keys", len(wanted))

    # -- row parts ------------------------------------------------------------------

    def map_rows(self, fn: Callable[[RowPart], Any]) -> list[Any]:
        import dask
        from dask import delayed

        rows = self._rows
        if rows is None:
            rows = [delayed(read_rows, pure=True)(p, self.spec, finite_scores=self.finite_scores,
                                                  n_classes=self._length) for p in self._parts]
            if self.passes > 1:  # the valid rows are kept for the next passes
                (rows,) = dask.persist(rows)
                self._rows = rows
        with phase("dask: one pass over the row parts"):
            got = dask.compute(*[delayed(_counted_apply_rows)(fn, r) for r in rows])
        if not self._checked:  # (the counts came with the first pass: no read of its own)
            self.add_up([stats for stats, _ in got], self.on_invalid, "dask")
            self._checked = True
        return [r for _, r in got if r is not None]

    def close(self) -> None:
        self._pooled = self._pieces = self._ranges = self._rows = None


# -- transform ------------------------------------------------------------------------

def transform_rows(ddf: Any, columns: dict[str, str], output_col: str,
                   predict: Callable[[Any], Any], vector: bool) -> Any:
    """``ddf`` with ``output_col`` = ``predict(partition[columns])``, lazily per partition.

    The meta is the partitions' function on ``ddf``'s meta (``predict`` on
    its empty frame), so a column of another type fails here, not when computed.
    """
    check_transform_columns([str(c) for c in ddf.columns], columns, output_col)
    meta = _predict_partition(ddf._meta, list(columns), output_col, predict, vector)
    return ddf.map_partitions(_predict_partition, list(columns), output_col, predict, vector,
                              meta=meta)


def _predict_partition(pdf: pd.DataFrame, columns: list[str], output_col: str,
                       predict: Callable[[Any], Any], vector: bool) -> pd.DataFrame:
    return with_prediction(pdf, output_col, predict(pdf[columns]), vector)


# -- summaries ------------------------------------------------------------------------

def _summary_piece(piece: Any, columns: list[str]) -> Any:
    """A piece of summary rows: an Arrow table, or (Parquet file, row groups) read here
    (only ``columns``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(piece, pa.Table):
        return piece
    path, groups = piece
    return pq.ParquetFile(path).read_row_groups(groups, columns=columns, use_threads=False)


def _pool_summary(piece: Any, source: Any, spec: KeySpec, finite_scores: bool, drop: bool
                  ) -> tuple[KeyedTable, dict[str, Any]]:
    """A piece of summary rows pooled by (key, score), checked as the rows would be."""
    problems: list[dict[str, float]] = []
    part = source.read_piece(_summary_piece(piece, source.columns_read(spec)), spec,
                             finite_scores, problems, drop)
    return part, problems[0]


class DaskSummaryRanges(DaskKeyedRanges):
    """The keyed ranges of summaries (:class:`~distcal.core.summary.SummarySource`) on Dask.

    The summaries' pooled rows are read by the workers (each Parquet file in
    pieces of a few row groups, in-memory tables in slices), pooled by
    (key, score) there, and then take the path of a row input's pooled
    partitions (sampled bounds, cut, merged per range): a list of summaries
    is merged on the cluster.
    """

    def __init__(self, source: Any, spec: KeySpec, *, on_invalid: str = "raise",
                 finite_scores: bool = False, passes: int = 1,
                 range_rows: int = DEFAULT_RANGE_ROWS, n_ranges: int | None = None,
                 samples_per_range: int = 64):
        import dask
        import pyarrow.parquet as pq
        from dask import delayed

        self._options(spec, on_invalid, finite_scores, passes, range_rows, n_ranges,
                      samples_per_range)
        self.source = source
        self.n_classes, self._length, self._classes = 0, None, [None]
        self.n_rows, self.weight_total = source.n_rows, source.weight_total
        self.dropped_rows, self.interval_widths = source.dropped_rows, None
        pieces: list[Any] = []
        step = max(1, self.range_rows // 4)
        for t in source.tables:
            pieces += [t.slice(a, step) for a in range(0, t.num_rows, step)]
        for f in source.files:  # a few row groups per task (the footers read here)
            meta = pq.ParquetFile(f).metadata
            group, rows = [], 0
            for g in range(meta.num_row_groups):
                group.append(g)
                rows += meta.row_group(g).num_rows
                if rows >= step:
                    pieces.append((f, group))
                    group, rows = [], 0
            if group:
                pieces.append((f, group))
        pooled = [delayed(_pool_summary, pure=True)(p, source, spec, finite_scores,
                                                    on_invalid == "drop") for p in pieces]
        with phase("dask: reading and pooling the summaries by (key, score)"):
            (self._pooled,) = dask.persist(pooled)
        self._parts = []
        log.info("dask: %d pieces of %d summary table(s)", len(pieces),
                 len(source.tables) + len(source.files))

    def add_up(self, stats: list[dict[str, Any]], on_invalid: str, engine: str) -> None:
        """The counts are the summaries' (the rows were checked when summarised), less the
        rows dropped; the DataError of the summarised rows for this method, if any
        (``stats``: the pieces' problems)."""
        self.n_rows, self.weight_total, self.dropped_rows = self.source.add_up(stats)

    def map_rows(self, fn: Callable[[RowPart], Any]) -> list[Any]:
        raise self.source.no_rows()
