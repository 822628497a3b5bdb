"""Keyed rows on the local engine: the input streamed in batches, pooled, spilled past a budget.

Each batch of the user's columns is checked (:func:`distcal.core.rows.read_rows`),
exploded into keyed rows and pooled by (key, score)
(:mod:`distcal.core.keyed`); the pooled tables are merged in memory while
they hold at most ``memory_rows`` distinct (key, score) pairs, and written
to disk as runs sorted by score past that (:class:`KeyedStore`). Ranges are
read back in score ranges: bounds from
evenly spaced samples of the runs, each run cut at the bounds (equal scores
stay together), the slices of a range pooled by (key, score); for several
passes each pooled range is written to disk as it is, and later passes read
those. So memory is set by ``batch_rows`` and ``memory_rows``, never by the
input's rows.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.distinct import DistinctTable
from ..core.keyed import Key, KeyedTable, KeySpec, merge_keyed, pool_rows, pool_sums
from ..core.rows import RowPart, check_columns, count_classes, read_rows, vector_lengths
from ..core.summary import SummarySource
from ..core.validate import check_unique_columns
from ..logs import describe_input, log, phase
from ..tables import is_path, iter_tables, open_dataset, read_all
from .base import KeyedRanges, check_transform_columns, with_prediction
from .frames import refuse_cluster_frames

__all__ = ["LocalKeyedRanges", "KeyedStore", "transform_rows"]

_FIELDS = ("code", "score", "weight", "positives", "count", "label_sum", "nonbinary", "wyy", "ww")


def input_batches(data: Any, columns: list[str], batch_rows: int
                  ) -> Iterator[pd.DataFrame | pa.Table]:
    """The input's ``columns`` in batches of at most ``batch_rows`` rows (frames as they are)."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, (pd.DataFrame, pa.Table)):
        n = len(data) if isinstance(data, pd.DataFrame) else data.num_rows
        for start in range(0, max(n, 1), batch_rows):
            yield data.iloc[start:start + batch_rows] if isinstance(data, pd.DataFrame) \
                else data.slice(start, batch_rows)
        return
    if not is_path(data):
        raise TypeError(f"cannot read data of type {type(data).__name__}: pass a pandas "
                        "DataFrame, a pyarrow Table, a Parquet path, a Spark DataFrame or a "
                        "Dask DataFrame")
    dataset = open_dataset(data)
    names = dataset.schema.names
    yield from iter_tables(dataset, [c for c in columns if c in names], batch_rows)


class KeyedStore:
    """Keyed tables of disjoint row sets: in memory up to a budget, else sorted runs on disk.

    While the tables held hold at most ``memory_rows`` distinct (key, score)
    pairs (or there is only one), they stay in memory and are merged when
    read (one range). Past that, they are merged and written to disk as one
    run, and every later table as a run of its own: flat arrays sorted by
    score, the key as a code of one dictionary for the whole store (one
    process). Memory is then one table being added plus the runs' pages
    being read.
    """

    def __init__(self, memory_rows: int, with_wyy: bool = False, keep: bool = False):
        self.memory_rows = int(memory_rows)
        self.with_wyy = with_wyy
        # Several passes: spilled ranges, once pooled, are kept on disk as they are.
        self.keep = keep
        self._kept: list[Path] | None = None
        self.keys: dict[Key, int] = {}
        self._pending: list[KeyedTable] = []
        self._pending_rows = 0
        self._runs: list[dict[str, np.ndarray]] = []
        self._tmp: Path | None = None

    def add(self, part: KeyedTable) -> None:
        if not len(part.table):
            return
        for k in part.keys:
            self.keys.setdefault(k, len(self.keys))
        self._pending.append(part)
        self._pending_rows += len(part.table)
        if self._pending_rows > self.memory_rows and (len(self._pending) > 1 or self._runs):
            self._spill(merge_keyed(self._pending))
            self._pending, self._pending_rows = [], 0

    def _spill(self, part: KeyedTable) -> None:
        """Write one keyed table as a run sorted by score."""
        codes = np.fromiter((self.keys[k] for k in part.keys), dtype=np.int64,
                            count=len(part.keys))
        per_row = np.diff(part.starts)
        t = part.table
        order = np.argsort(t.score, kind="stable")
        run = {"code": np.repeat(codes, per_row)[order], "score": t.score[order],
               "weight": t.weight[order], "positives": t.positives[order],
               "count": t.count[order], "label_sum": t.label_sum[order],
               "nonbinary": np.repeat(~part.binary, per_row)[order],
               # w y^2 pooled for evaluation; zeros stand for "not pooled"
               "wyy": t.weight[:0].copy() if part.wyy is None else part.wyy[order],
               "ww": t.weight[:0].copy() if part.ww is None else part.ww[order]}
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="distcal-spill-"))
        run_dir = self._tmp / f"run{len(self._runs):05d}"
        run_dir.mkdir()
        for f in _FIELDS:
            np.save(run_dir / f"{f}.npy", run[f])
        del run
        # Plain array views of the memory maps: np.memmap's slicing runs Python code, and
        # the read-back slices every run once per range (runs x ranges slices).
        self._runs.append({f: np.load(run_dir / f"{f}.npy", mmap_mode="r").view(np.ndarray)
                           for f in _FIELDS})

    @property
    def spilled(self) -> bool:
        return bool(self._runs) or self._kept is not None

    def ranges(self) -> Iterator[KeyedTable]:
        """Ascending, non-overlapping score ranges, each pooled by (key, score)."""
        if not self.spilled:
            if self._pending:
                merged = merge_keyed(self._pending)
                self._pending = [merged]
                yield merged
            return
        if self._kept is not None:
            yield from map(self._read_range, self._kept)
            return
        if self._pending:
            self._spill(merge_keyed(self._pending))
            self._pending, self._pending_rows = [], 0
        kept: list[Path] = []
        for table in self._pooled_ranges():
            if self.keep:
                kept.append(self._write_range(table, len(kept)))
            yield table
        if self.keep:  # read to the end: later passes read the pooled ranges, not the runs
            self._kept, self._runs = kept, []
            assert self._tmp is not None
            for run_dir in self._tmp.glob("run*"):
                shutil.rmtree(run_dir)

    def _write_range(self, table: KeyedTable, i: int) -> Path:
        """A pooled range written as it is (the store's key codes, the table's arrays)."""
        assert self._tmp is not None
        path = self._tmp / f"range{i:05d}.npz"
        t = table.table
        codes = np.fromiter((self.keys[k] for k in table.keys), np.int64, len(table.keys))
        arrays = {"codes": codes, "starts": table.starts, "binary": table.binary,
                  "score": t.score, "weight": t.weight, "positives": t.positives,
                  "count": t.count, "label_sum": t.label_sum}
        if table.wyy is not None and table.ww is not None:
            arrays.update(wyy=table.wyy, ww=table.ww)
        np.savez(path, **arrays)  # type: ignore[arg-type]
        return path

    def _read_range(self, path: Path) -> KeyedTable:
        keys = list(self.keys)
        with np.load(path) as z:
            squares = "wyy" in z.files
            return KeyedTable([keys[c] for c in z["codes"]], z["starts"], DistinctTable(
                z["score"], z["weight"], z["positives"], z["count"], z["label_sum"]),
                z["binary"], z["wyy"] if squares else None, z["ww"] if squares else None)

    def _pooled_ranges(self) -> Iterator[KeyedTable]:
        """The spilled runs read back in score ranges, each pooled by (key, score)."""
        keys = list(self.keys)
        total = sum(r["score"].shape[0] for r in self._runs)
        # four times as many: slack for skew, and a range read back within a quarter budget
        n_ranges = max(1, -(-4 * total // self.memory_rows))
        per_run = max(1, 64 * n_ranges // len(self._runs))
        samples = np.sort(np.concatenate([
            np.asarray(r["score"][np.linspace(0, r["score"].shape[0] - 1, per_run)
                                  .astype(np.intp)]) for r in self._runs]))
        bounds = np.unique(samples[np.linspace(0, samples.shape[0] - 1, n_ranges + 1)
                                   .astype(np.intp)[1:-1]])
        cuts = [np.concatenate(([0], np.searchsorted(r["score"], bounds, side="left"),
                                [r["score"].shape[0]])) for r in self._runs]
        for k in range(bounds.shape[0] + 1):
            live = [(run, int(cut[k]), int(cut[k + 1]))
                    for run, cut in zip(self._runs, cuts) if cut[k + 1] > cut[k]]
            if live:  # (wyy and ww are empty in every run when not pooled)
                cat = {f: np.concatenate([run[f][a:b] for run, a, b in live]) for f in _FIELDS}
                yield pool_sums(cat["code"], keys, cat["score"], cat["weight"],
                                cat["positives"], cat["count"], cat["label_sum"],
                                cat["nonbinary"], cat["wyy"] if self.with_wyy else None,
                                cat["ww"] if self.with_wyy else None)

    def close(self) -> None:
        self._runs, self._pending, self._kept = [], [], None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


class LocalKeyedRanges(KeyedRanges):
    """The keyed rows of a local input (see ``KeyedRanges``), read in batches.

    The first ``map`` reads, checks and pools the whole input once (the
    store is kept for later passes); every ``map_rows`` reads the input
    again, batch by batch, except an in-memory frame opened for several
    passes: its checked rows are kept from the first complete read (about
    the frame's own size; temperature scaling's Newton passes would
    otherwise read a vector column again each time, which costs more than
    the pass).

    ``memory_rows`` defaults to 2^23, or for a frame in memory to the most
    (key, score) pairs its rows make (rows x K classes, x 2 with ``by``: each
    row's segment and the global key), which spilling would not make smaller:
    it saved no peak memory (1e7 rows: 1.74 GB spilled, 1.81 GB not; 1e6 x 10
    classes: 1.03 GB both) and took up to twice the time of a fit.
    ``batch_rows`` defaults to 2^20, or for a frame in memory to all its rows:
    pooled in one piece, its (key, score) pairs are sorted once instead of per
    batch and then again to merge the batches (an isotonic fit of 1e7
    all-distinct rows: 0.8 s instead of 2.6 s, and 0.93 GB of peak memory
    instead of 1.64 GB).
    """

    def __init__(self, data: Any, spec: KeySpec, *, on_invalid: str = "raise",
                 finite_scores: bool = False, passes: int = 1, memory_rows: int | None = None,
                 batch_rows: int | None = None, chunk_rows: int = 1 << 22):
        refuse_cluster_frames(data)
        if is_path(data):  # a batch holds only the needed columns: name the file's in an error
            check_columns(open_dataset(data).schema.names, spec)
        self.data, self.spec, self.on_invalid = data, spec, on_invalid
        self.finite_scores = finite_scores
        in_memory = isinstance(data, (pd.DataFrame, pa.Table, pa.RecordBatch))
        if batch_rows is None:
            batch_rows = max(len(data), 1) if in_memory else 1 << 20
        self.batch_rows, self.chunk_rows = int(batch_rows), int(chunk_rows)
        # K, and the vectors' common length (K' = K, or 1 when K = 2)
        self.n_classes, self.length = count_classes(spec, self._vector_lengths)
        if memory_rows is None:  # a frame: the most (key, score) pairs its rows make
            per_row = max(self.n_classes, 1) * (2 if spec.by else 1)
            memory_rows = max(1 << 23, len(data) * per_row if in_memory else 0)
        self.store = KeyedStore(memory_rows, with_wyy=spec.pool_squares, keep=passes > 1)
        self._pooled = False
        # Saved or in-memory summaries: their pooled rows go to the store as they are.
        self.summary = data if isinstance(data, SummarySource) else None
        self._keep_rows = passes > 1 and in_memory
        self._kept: list[tuple[RowPart, dict[str, Any]]] | None = None

    def _vector_lengths(self) -> Iterator[np.ndarray]:
        """The vector score column's lengths, counted batch by batch (``count_classes``)."""
        name = str(self.spec.score_col)
        for batch in input_batches(self.data, [name], self.batch_rows):
            names = list(map(str, batch.columns)) if isinstance(batch, pd.DataFrame) \
                else batch.schema.names
            if name not in names:
                break  # read_rows names the missing column
            yield vector_lengths(batch, name)

    def _rows(self) -> Iterator[tuple[RowPart, dict[str, Any]]]:
        for batch in input_batches(self.data, self.spec.columns, self.batch_rows):
            yield read_rows(batch, self.spec, finite_scores=self.finite_scores,
                            n_classes=self.length)

    def _pool(self) -> None:
        if self.summary is not None:
            problems: list[dict[str, float]] = []
            with phase("local: read the summaries' pooled rows"):
                for batch in self.summary.batches(self.batch_rows,
                                                  self.summary.columns_read(self.spec)):
                    self.store.add(self.summary.read_piece(
                        batch, self.spec, self.finite_scores, problems,
                        drop=self.on_invalid == "drop"))
            self.n_rows, self.weight_total, self.dropped_rows = self.summary.add_up(problems)
            self._pooled = True
            return
        stats = []
        classes = self.spec.classes(self.n_classes)
        with phase("local: read, validate and pool %s", describe_input(self.data)):
            for rows, st in self._rows():
                stats.append(st)
                if not rows.n_rows or (st["invalid"] and self.on_invalid == "raise"):
                    continue  # keep counting: the error names totals
                self.store.add(pool_rows(rows, classes, self.spec.pool_squares,
                                         self.spec.pool_magnitudes))
        self.add_up(stats, self.on_invalid, "local")
        self._pooled = True
        log.info("local: %d keys pooled%s", len(self.store.keys),
                 " (spilled to disk)" if self.store.spilled else "")

    def map(self, fn: Callable[[KeyedTable], Any]) -> list[Any]:
        if not self._pooled:
            self._pool()
        return [fn(t) for t in self.store.ranges() if len(t.table)]

    def map_rows(self, fn: Callable[[RowPart], Any]) -> list[Any]:
        if self.summary is not None:
            raise self.summary.no_rows()
        out, stats = [], []
        kept: list[tuple[RowPart, dict[str, Any]]] = []
        for rows, st in self._kept if self._kept is not None else self._rows():
            if self._keep_rows:
                kept.append((rows, st))
            stats.append(st)
            if rows.n_rows and not (st["invalid"] and self.on_invalid == "raise"):
                out.append(fn(rows))
        if self._keep_rows:  # read to the end
            self._kept = kept
        if not self._pooled:
            self.add_up(stats, self.on_invalid, "local")
        return out

    def close(self) -> None:
        self.store.close()


def transform_rows(data: Any, columns: dict[str, str], output_col: str,
                   predict: Callable[[Any], Any], vector: bool) -> Any:
    """pandas in, pandas out; pyarrow in, pyarrow out; a Parquet path in, pandas out."""
    refuse_cluster_frames(data)
    if is_path(data):
        data = read_all(open_dataset(data)).to_pandas()
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, (pd.DataFrame, pa.Table)):
        raise TypeError(f"cannot transform data of type {type(data).__name__}")
    names = list(map(str, data.columns)) if isinstance(data, pd.DataFrame) \
        else data.schema.names
    check_unique_columns(names, columns)  # before data[c] reads
    check_transform_columns(names, columns, output_col)
    return with_prediction(data, output_col, predict(data), vector)
