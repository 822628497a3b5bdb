"""A distinct-score table larger than memory, as ordered score ranges.

Batches are pooled map-side (:func:`~distcal.core.distinct.pool_ties`) and
merged in memory while the merged table stays under ``memory_rows``
distinct scores. Past that, the table is written to disk as a sorted run
(one ``.npy`` file per column) and memory starts again. Reading back is the
range shuffle of docs/design.md done on one machine: bounds are taken from
evenly spaced samples of the sorted runs, each run is cut at the bounds by
binary search on a memory map (equal scores stay together), and the slices
of one range are merged. Each range is a contiguous, non-overlapping score
interval, so every method can work range by range in ascending order.

This is an external merge sort written here because no library we depend on
offers one over numpy columns; it is a few lines on top of ``np.load``'s
memory maps.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .distinct import DistinctTable, merge_tables

__all__ = ["TableStore"]

_FIELDS = ("score", "weight", "positives", "count", "label_sum")


class TableStore:
    """Collects distinct-score tables of disjoint row sets; yields ranges."""

    def __init__(self, memory_rows: int = 1 << 23, spill_dir: str | None = None):
        self.memory_rows = int(memory_rows)
        self.spill_dir = spill_dir
        self._pending: list[DistinctTable] = []
        self._pending_rows = 0
        self._runs: list[dict[str, np.ndarray]] = []
        self._tmp: Path | None = None
        self.binary = True

    # -- collecting -----------------------------------------------------
    def add(self, table: DistinctTable) -> None:
        if not len(table):
            return
        self.binary &= table.binary
        self._pending.append(table)
        self._pending_rows += len(table)
        if self._pending_rows > self.memory_rows and len(self._pending) > 1:
            # A table over the whole budget is a sorted run already: spilled as
            # it is (merging it first sorts what reading merges anyway: the fit
            # of 3e7 distinct scores from a path took 2x, bench/RESULTS.md).
            # Smaller ones are merged first, which keeps the runs few.
            for t in self._pending:
                if len(t) > self.memory_rows:
                    self._spill(t)
            small = [t for t in self._pending if len(t) <= self.memory_rows]
            merged = merge_tables(small)
            self._pending, self._pending_rows = [merged] if len(merged) else [], len(merged)
            if len(merged) > self.memory_rows // 2:
                self._spill(merged)
                self._pending, self._pending_rows = [], 0

    def _spill(self, table: DistinctTable) -> None:
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="distcal-spill-", dir=self.spill_dir))
        run_dir = self._tmp / f"run{len(self._runs):05d}"
        run_dir.mkdir()
        for f in _FIELDS:
            np.save(run_dir / f"{f}.npy", getattr(table, f))
        self._runs.append({f: np.load(run_dir / f"{f}.npy", mmap_mode="r") for f in _FIELDS})

    @property
    def spilled(self) -> bool:
        return bool(self._runs)

    @property
    def n_distinct_upper(self) -> int:
        return self._pending_rows + sum(int(r["score"].shape[0]) for r in self._runs)

    # -- reading --------------------------------------------------------
    def table(self) -> DistinctTable:
        """Everything as one in-memory table (only when nothing was spilled)."""
        if self.spilled:
            raise MemoryError("the distinct-score table was spilled to disk; read it by ranges")
        merged = merge_tables(self._pending)
        self._pending, self._pending_rows = [merged], len(merged)
        return merged

    def ranges(self, max_rows: int | None = None) -> Iterator[DistinctTable]:
        """Ascending, non-overlapping score ranges of at most ~max_rows rows each."""
        max_rows = int(max_rows or self.memory_rows)
        if not self.spilled:
            t = self.table()
            for start in range(0, len(t), max_rows):
                yield t.slice(start, start + max_rows)
            return
        if self._pending:
            self._spill(merge_tables(self._pending))
            self._pending, self._pending_rows = [], 0
        total = sum(r["score"].shape[0] for r in self._runs)
        n_ranges = max(1, -(-2 * total // max_rows))  # twice as many as needed: slack for skew
        per_run = max(1, 64 * n_ranges // len(self._runs))
        samples = np.sort(np.concatenate([
            np.asarray(r["score"][np.linspace(0, r["score"].shape[0] - 1, per_run).astype(np.intp)])
            for r in self._runs]))
        bounds = np.unique(samples[np.linspace(0, samples.shape[0] - 1, n_ranges + 1)
                                   .astype(np.intp)[1:-1]])
        cuts = [np.concatenate(([0], np.searchsorted(r["score"], bounds, side="left"),
                                [r["score"].shape[0]])) for r in self._runs]
        for k in range(bounds.shape[0] + 1):
            parts = []
            for run, cut in zip(self._runs, cuts):
                lo, hi = int(cut[k]), int(cut[k + 1])
                if hi > lo:
                    score, weight, positives, count, label_sum = (
                        np.array(run[f][lo:hi]) for f in _FIELDS)
                    parts.append(DistinctTable(score, weight, positives, count, label_sum,
                                               binary=self.binary))
            merged = merge_tables(parts)
            if len(merged):
                yield merged

    def close(self) -> None:
        self._runs = []
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> TableStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
