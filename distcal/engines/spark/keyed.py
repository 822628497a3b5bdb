"""The keyed rows of a Spark DataFrame in score ranges (:class:`~distcal.engines.base.KeyedRanges`).

A binary score (with or without ``by=``) takes the short route: Spark's
own ``repartitionByRange`` on the score (its sampling job reads the input
in the JVM only; asked for k / (1 - hot share) ranges, since equal bounds
collapse), and each range reads its raw rows with ``read_rows``, makes the
global and segment keys and pools them (:func:`pool_raw`). Per-class
scores need a Python map side before the shuffle (each class has its own
score); they take the route below (:func:`pool_ranges`). Either way the
number of ranges comes from the sample of step 1 and a range is pooled as
its batches stream in.

The first pass maps :func:`pool_runner` over the ranges (one job): each
range is read, checked and pooled, ``fn`` runs on its keyed table, and the
range becomes rows (range id, part, payload) (:func:`pooled_rows`):
validation counts (part -1) and ``fn``'s result (part -2), pickled. With
``passes == 1`` those rows are collected and nothing is persisted. With
``passes > 1`` the ranges are pooled once and kept pooled: each range's
rows also hold its keyed table (:func:`table_payloads`: its keys pickled
(part 0), its sums as LZ4-compressed Arrow IPC streams of at most
``CHUNK_ROWS`` rows (parts 1, 2, ...)). That frame keeps the ranges'
partitions (``mapInArrow`` is narrow) and is persisted
(``MEMORY_AND_DISK``; unpersisted by ``close``); the first pass's results
are its rows of parts < 0, read in the JVM. Every later pass maps
:func:`table_runner` over its tables, coalesced to the default number of
ranges (a pass over pooled ranges is mostly a task's fixed cost): each
range's table is read back as written, then ``fn`` runs. A later pass thus
reads each range's distinct (key, score) pairs (~9 B each for a distinct
score with unit weights, compressed), never its rows, and checks and pools
nothing again; a Python worker holds one range's pairs at a time. Once the
keys still running are few (``narrow``), the tables are cut to theirs
(:func:`narrow_runner`) and kept so for the passes left.

How per-class rows flow (one job per ``map``, after a sample when opened):

1. **Opened** (driver): the columns are checked against the schema (the
   same ``DataError`` as :func:`~distcal.core.rows.read_rows`); K of a
   vector column is counted over the input in the JVM
   (:func:`.schema.vector_length_counts`; ``VectorUDT`` columns become
   ``array<double>`` in the JVM first). A Bernoulli sample of the input
   (about ``sample_rows`` keyed rows) is read and exploded in Python
   exactly as the rows will be (:func:`parts_runner` with
   :func:`_own_keys`); from its (key, score) pairs come the
   number of ranges (:func:`ranges_for`: estimated distinct (key, score)
   pairs over the per-range budget ``range_rows``) and the range bounds
   (quantiles of the sample's distinct pairs' scores, so a hot score
   counts once and does not eat the bounds).
2. **Map side** (one Python map over the input partitions, :func:`row_runner`):
   each Arrow batch is read with ``read_rows`` (every check, counted) and
   its valid rows exploded per class (:func:`distcal.core.keyed.explode`);
   a keyed row is (range id, score, 0/1 label, weight, class, the raw
   segment values). Segments are *not* exploded here: a row's segment key
   has the row's score, so the range side makes the global and segment
   keys from one shuffled row (half the shuffle of exploding first). The
   task's validation counts travel as one extra row (range id -1).
3. **Shuffle**: ``repartition(k, id)`` on a range id that Spark's hash
   partitioner sends to partition = range id (:func:`partition_ids`): the
   range bounds are already known, so there is no ``repartitionByRange``
   sampling job, which would run the Python map side a second time.
4. **Range side** (:func:`pool_runner` with :func:`pool_ranges`): the
   range's Arrow batches are gathered into chunks of ``CHUNK_ROWS``, each
   chunk pooled by (key, score) (:func:`~distcal.core.keyed.pool_keyed`)
   and the pooled runs merged as they come (:class:`KeyedRuns`, exact);
   then ``fn`` runs on the range's :class:`~distcal.core.keyed.KeyedTable`
   and its pickled result goes to the driver (:func:`pooled_rows`). A
   worker holds a chunk and its range's distinct (key, score) pairs, never
   the range's rows.

The driver sorts the results by range id, adds up the validation counts with
:func:`~distcal.core.rows.add_up_rows` (raising the input's ``DataError``)
at the first map, and returns the results of the non-empty ranges. Nothing
that grows with rows or distinct scores reaches it.
"""

from __future__ import annotations

import math
import pickle
import zlib
from collections.abc import Callable, Collection, Iterator
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.distinct import DistinctTable, estimate_distinct, merge_tables
from ...core.keyed import (
    GLOBAL,
    Key,
    KeyedTable,
    KeySpec,
    explode,
    factorize_keys,
    merge_keyed,
    pool_keyed,
    pool_rows,
)
from ...core.rows import RowPart, check_columns, count_classes, merge_stats, not_vectors, read_rows
from ...errors import VECTORS_EXPECTED, column_type
from ...logs import log, phase
from ..base import KeyedRanges
from .schema import (
    column_kind,
    fields_of,
    is_vector_udt,
    map_in_arrow,
    quote,
    vector_array,
    vector_length_counts,
    wall_clock,
)
from .session import default_ranges, result_bytes, with_arrow_batches

__all__ = ["SparkKeyedRanges", "KeyedRuns", "chunks", "result_batch", "range_result",
           "row_runner", "pool_runner", "table_runner", "ranges_for", "partition_ids",
           "RANGE_ROWS", "CHUNK_ROWS", "SAMPLE_ROWS"]

# Per-range budget of distinct (key, score) pairs, each keyed row under its own key
# (ranges_for). A pooled pair takes 40 B (5 float64), but merging the pooled runs peaks at
# ~270 B per pair of the range (~170 B for one key; measured, docs/scale.md), so 200k
# pairs keep a worker within ~55 MB plus one chunk (~30 MB) above its imports: a 600 MB
# Python worker holds it (by=, with the global tables on top: 374 MB at the peak, measured).
RANGE_ROWS = 200_000
# Rows pooled at once on the range side: numpy sorts ~0.5M rows efficiently,
# and the chunk is a fixed part of a worker's memory (~40 MB of columns).
CHUNK_ROWS = 1 << 19
# Keyed rows sampled when opened (bounds and the distinct estimate).
SAMPLE_ROWS = 50_000
# A (key, score) pair seen this often in the sample is a hot one (ranges_for).
HOT_PAIR = 10
# Result rows: the range id (-1: validation counts) and the pickled result.
RESULT_SCHEMA = "rid long, payload binary"
# A range's pooled rows (pooled_rows): the range id, the part (-1: validation counts, -2:
# the first pass's result, 0: the table's keys, 1...: its sums) and the payload.
POOLED_SCHEMA = "rid long, part long, payload binary"
_POOLED_ARROW = pa.schema([("rid", pa.int64()), ("part", pa.int64()), ("payload", pa.binary())])


# -- both sides ------------------------------------------------------------------------

def chunks(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """A partition's non-empty Arrow batches gathered into tables of at least ``rows`` rows."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(pending)
            pending, count = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def result_batch(rid: int, payload: Any) -> pa.RecordBatch:
    """One result row (:data:`RESULT_SCHEMA`): a range id and ``payload``, pickled."""
    return pa.RecordBatch.from_pydict(
        {"rid": [rid], "payload": [pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)]},
        schema=pa.schema([("rid", pa.int64()), ("payload", pa.binary())]))


def partition_id() -> int:
    """The partition of the running Spark task (a range partition: its range)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "runs inside a Spark task"
    return context.partitionId()


def range_result(fn: Callable[[KeyedTable], Any], runs: KeyedRuns, ok: bool = True,
                 **extra: Any) -> pa.RecordBatch:
    """The result row of a range partition: its partition id, and ``extra`` with whether
    the range has pooled rows (``empty``) and ``fn``'s result on its keyed table (None
    when empty or not ``ok``), pickled."""
    table = runs.pop()
    payload = {**extra, **_outcome(fn, table, ok)}
    del table
    return result_batch(partition_id(), payload)


def _outcome(fn: Callable[[KeyedTable], Any], table: KeyedTable, ok: bool = True
            ) -> dict[str, Any]:
    """Whether a range's keyed table has pooled rows (``empty``), and ``fn``'s result on it
    (None when empty or not ``ok``)."""
    empty = not len(table.table)
    return {"empty": empty, "result": fn(table) if ok and not empty else None}


def collect_results(df: Any, runner: Callable[[Iterator[pa.RecordBatch]],
                                               Iterator[pa.RecordBatch]]) -> list[tuple[int, Any]]:
    """``runner`` mapped over ``df``'s partitions (one ``mapInArrow`` job, in the Arrow
    batches of :func:`.session.with_arrow_batches`): its result rows
    (:data:`RESULT_SCHEMA`) as (range id, payload unpickled), by range id."""
    got = with_arrow_batches(df.sparkSession, lambda: map_in_arrow(
        df, runner, RESULT_SCHEMA).collect())
    return sorted(((int(r["rid"]), pickle.loads(r["payload"])) for r in got),
                  key=lambda one: one[0])


def _keyed(rows: RowPart, classes: list[Any]) -> tuple[np.ndarray, np.ndarray,
                                                        np.ndarray | None, np.ndarray | None,
                                                        np.ndarray | None]:
    """A part's valid rows exploded per class, segments not: (score, label, weight, class or
    None, segment code or None), one entry per keyed row."""
    codes, keys, score, label, weight = explode(rows.score, rows.label, rows.weight, None,
                                                classes)
    cls = None
    if classes != [None]:
        cls = np.asarray([k[1] for k in keys], dtype=np.int64)[codes]
    seg = None if rows.segments is None else np.tile(rows.segments[0], len(classes))
    return score, label, weight, cls, seg


def _key_hashes(keys: list[Key]) -> np.ndarray:
    """A stable 32-bit hash of each key (for counting distinct pairs in the sample)."""
    return np.fromiter((zlib.crc32(repr(k).encode()) for k in keys), dtype=np.uint64,
                       count=len(keys))


def _own_keys(rows: RowPart, classes: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(score, key hash) of a part's keyed rows, each under its own key: its segment's
    where it has one, else the global key (what a range's budget counts: the global
    keys' tables, pooled from the same rows, are never larger, :func:`ranges_for`)."""
    codes, keys, score, _, _ = explode(rows.score, rows.label, rows.weight, rows.segments,
                                       classes)
    n = rows.n_rows * len(classes)  # the global keys' rows come first (explode)
    own = codes[:n] if rows.segments is None else np.where(codes[n:] >= 0, codes[n:],
                                                             codes[:n])
    return score[:n] + 0.0, _key_hashes(keys)[own]


# -- opened: the sample ------------------------------------------------------------------

def ranges_for(scores: np.ndarray, hashes: np.ndarray, fraction: float, range_rows: int,
               least: int, n_ranges: int | None = None) -> tuple[np.ndarray, float, float]:
    """The range bounds (ascending, distinct), the estimated distinct (key, score) pairs and
    the share of the keyed rows on hot pairs.

    ``scores``/``hashes``: the sample's keyed rows (a ``fraction`` of all),
    each under its own key (:func:`_own_keys`). The number of ranges is
    ``n_ranges`` if given, else the estimated distinct pairs
    (:func:`~distcal.core.distinct.estimate_distinct`) over ``range_rows``,
    at least ``least``. With segments a range also holds the global keys'
    tables, which are never larger than the segments' (each global pair has
    a row, whose own pair is in the range): at most twice ``range_rows``
    pairs. Counting them too would double the ranges of a ``by=`` fit, and
    with them its tasks and results. The bounds are evenly spaced
    quantiles of the scores of the sample's *distinct* pairs: ranges get
    about equal numbers of distinct pairs (a worker's memory), and a score
    held by many rows is one pair, not a run of equal bounds.
    """
    m = scores.shape[0]
    if not m:
        return np.zeros(0), 0.0, 0.0
    pairs, counts = np.unique(np.stack([hashes.astype(np.float64), scores], axis=1), axis=0,
                              return_counts=True)
    # Pairs seen HOT_PAIR times or more hold many rows each: the estimator
    # assumes equally frequent values and would take their repeats for ties
    # everywhere. They are counted as they are; the rest is estimated.
    hot = counts >= HOT_PAIR
    m_rest = m - int(counts[hot].sum())
    total = m / fraction if fraction > 0 else float(m)
    distinct = float(hot.sum()) + estimate_distinct(
        int(math.ceil(total * m_rest / m)), m_rest, int((~hot).sum()))
    k = int(n_ranges) if n_ranges else max(least, int(math.ceil(distinct / max(range_rows, 1))))
    pair_scores = np.sort(pairs[:, 1])
    at = (np.arange(1, k) * pair_scores.shape[0]) // k
    bounds = np.unique(pair_scores[at]) if k > 1 else np.zeros(0)
    return bounds, distinct, 1.0 - m_rest / m


def partition_ids(spark: Any, k: int) -> list[int]:
    """For each range i < k, a long that ``repartition(k, col)`` sends to partition i.

    Spark's hash partitioner puts a row in ``pmod(hash(col), k)`` (Murmur3,
    seed 42: SQL's ``hash``); a small query finds a value for each
    partition among the first 64k longs, so range i is partition i and no
    two ranges share a task.
    """
    from pyspark.sql import functions as F

    n = 64 * k + 64
    rows = (spark.range(0, n).select(F.col("id"), F.expr(f"pmod(hash(id), {k})").alias("p"))
            .groupBy("p").agg(F.min("id").alias("id")).collect())
    found = {int(r["p"]): int(r["id"]) for r in rows}
    missing = [i for i in range(k) if i not in found]
    if missing:  # ~exp(-64) per partition; then ranges share tasks (still exact)
        spare = sorted(found.values())
        for j, i in enumerate(missing):
            found[i] = spare[j % len(spare)]
    return [found[i] for i in range(k)]


# -- the map side ----------------------------------------------------------------------

def row_runner(spec: KeySpec, finite_scores: bool, n_classes: int | None, classes: list[Any],
               bounds: np.ndarray, schema: pa.Schema
               ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Input batches to keyed rows with their range id; then one row of counts (id -1)."""
    by = list(spec.by)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stats: dict[str, Any] | None = None
        out = None
        for data in chunks(batches, 1):  # each non-empty batch
            if out is None:  # _k0, _k1, ... before _st: the input's Arrow types of ``by``
                keys = [pa.field(f"_k{j}", data.schema.field(b).type) for j, b in enumerate(by)]
                out = pa.schema(list(schema)[:-1] + keys + list(schema)[-1:])
            rows, st = read_rows(data, spec, finite_scores=finite_scores, n_classes=n_classes)
            stats = merge_stats(stats, st)
            if not rows.n_rows:
                continue
            score, label, weight, cls, seg = _keyed(rows, classes)
            cols: dict[str, Any] = {
                "_r": np.searchsorted(bounds, score, side="right").astype(np.int64),
                "_s": score, "_y": label.astype(np.float64)}
            if spec.weight_col is not None:
                cols["_w"] = weight
            if cls is not None:
                cols["_c"] = cls
            if seg is not None:
                assert rows.segments is not None
                seg_keys = rows.segments[1]
                idx = pa.array(seg, mask=seg < 0)
                for j in range(len(by)):
                    values = pa.array([key[j] for key in seg_keys],
                                      type=out.field(f"_k{j}").type)
                    cols[f"_k{j}"] = values.take(idx)
            cols["_st"] = pa.nulls(score.shape[0], pa.binary())
            yield pa.RecordBatch.from_pydict(cols, schema=out)
        if stats is not None and out is not None:
            payload = pickle.dumps(stats, protocol=pickle.HIGHEST_PROTOCOL)
            yield pa.RecordBatch.from_pydict(
                {name: ([-1] if name == "_r" else [payload] if name == "_st" else [None])
                 for name in out.names}, schema=out)

    return run


# -- the range side ----------------------------------------------------------------------

class KeyedRuns:
    """A range's pooled chunks, merged as they come (memory: its distinct (key, score) pairs).

    Pooled runs are merged pairwise whenever the newest is at least half
    the size of the one before it (the merge rule of timsort's run stack),
    so at most ~log2(rows / chunk) runs are held and every pooled row takes
    part in O(log) merges; pooling commutes (docs/design.md), so the result
    is the keyed table of all the range's rows.
    """

    def __init__(self) -> None:
        self.runs: list[KeyedTable] = []

    def add(self, table: KeyedTable) -> None:
        if not len(table.table):
            return
        self.runs.append(table)
        while len(self.runs) > 1 and 2 * len(self.runs[-1].table) >= len(self.runs[-2].table):
            last = self.runs.pop()
            self.runs[-1] = _merge([self.runs[-1], last])

    def table(self) -> KeyedTable:
        return _merge(self.runs)

    def pop(self) -> KeyedTable:
        """:meth:`table`, the runs released (the range then holds its table alone)."""
        table = self.table()
        self.runs.clear()
        return table


def _merge(parts: list[KeyedTable]) -> KeyedTable:
    """:func:`~distcal.core.keyed.merge_keyed`; runs of one and the same key (a binary
    score without segments) by :func:`~distcal.core.distinct.merge_tables`, whose stable
    sort merges sorted runs cheaply (the same table: pooling commutes)."""
    if len(parts) > 1 and all(len(p.keys) == 1 and p.keys == parts[0].keys and p.wyy is None
                              for p in parts):
        table = merge_tables([p.table for p in parts])
        return KeyedTable.single(table, parts[0].keys[0])
    return merge_keyed(parts)


def pool_chunk(data: pa.Table, n_by: int, weighted: bool, per_class: bool,
               magnitudes: bool = False) -> KeyedTable:
    """One chunk of a range's keyed rows pooled by (key, score); segments exploded here
    (``magnitudes``: :attr:`~distcal.core.keyed.KeySpec.pool_magnitudes`)."""
    score = data.column("_s").to_numpy()
    label = data.column("_y").to_numpy()
    weight = data.column("_w").to_numpy() if weighted else None
    if per_class:
        ucls, ci = np.unique(data.column("_c").to_numpy(), return_inverse=True)
        classes: list[Any] = ucls.tolist()
        ci = ci.astype(np.int64)
    else:
        classes, ci = [None], np.zeros(score.shape[0], np.int64)
    m = len(classes)
    keys: list[Key] = [(GLOBAL, c) for c in classes]
    if not n_by:
        return pool_keyed(ci, keys, score, label, weight, magnitudes=magnitudes)
    seg, seg_keys = factorize_keys([data.column(f"_k{j}") for j in range(n_by)])
    keys += [(s, c) for s in seg_keys for c in classes]
    seg_codes = np.where(seg >= 0, m + seg * m + ci, -1)
    return pool_keyed(np.concatenate([ci, seg_codes]), keys, np.concatenate([score, score]),
                      np.concatenate([label, label]),
                      None if weight is None else np.concatenate([weight, weight]),
                      magnitudes=magnitudes)


def pool_ranges(batches: Iterator[pa.RecordBatch], n_by: int, weighted: bool, per_class: bool,
                chunk_rows: int, magnitudes: bool = False
                ) -> tuple[list[bytes], dict[int, KeyedRuns]]:
    """A range partition's keyed rows (:func:`row_runner`'s, shuffled) pooled as their
    chunks stream in: the map side's validation counts that came with them (pickled) and
    each range's pooled runs, by range id."""
    import pyarrow.compute as pc

    runs: dict[int, KeyedRuns] = {}
    stats: list[bytes] = []
    for data in chunks(batches, chunk_rows):
        rid = data.column("_r")
        counts = data.column("_st")
        if counts.null_count < data.num_rows:
            stats += counts.drop_null().to_pylist()
            data = data.filter(pc.is_null(counts))
            rid = data.column("_r")
        if not data.num_rows:
            continue
        lo, hi = pc.min_max(rid).values()
        if lo.as_py() == hi.as_py():
            parts = [(int(lo.as_py()), data)]
        else:  # two ranges in one task (not expected: see partition_ids)
            r = rid.to_numpy()
            parts = [(int(v), data.filter(pa.array(r == v))) for v in np.unique(r)]
        for v, part in parts:
            runs.setdefault(v, KeyedRuns()).add(pool_chunk(part, n_by, weighted, per_class,
                                                                  magnitudes))
        del data, parts
    return stats, runs


def pool_raw(batches: Iterator[pa.RecordBatch], spec: KeySpec, finite_scores: bool,
             chunk_rows: int) -> tuple[list[bytes], dict[int, KeyedRuns]]:
    """A range partition of the user's rows (a binary score, raw) read, checked and pooled
    as its chunks stream in, as :func:`pool_ranges` returns it: its counts (pickled) and
    its pooled runs under its partition id (the range id); nothing without rows."""
    stats: dict[str, Any] | None = None
    runs = KeyedRuns()
    for data in chunks(batches, chunk_rows):
        rows, st = read_rows(data, spec, finite_scores=finite_scores)
        stats = merge_stats(stats, st)
        del data
        if rows.n_rows:
            runs.add(pool_rows(rows, [None], spec.pool_squares, spec.pool_magnitudes))
    if stats is None:  # no rows
        return [], {}
    return [pickle.dumps(stats, pickle.HIGHEST_PROTOCOL)], {partition_id(): runs}


def pool_runner(fn: Callable[[KeyedTable], Any],
                pool: Callable[[Iterator[pa.RecordBatch]],
                               tuple[list[bytes], dict[int, KeyedRuns]]],
                weighted: bool, chunk_rows: int, keep: bool
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A range partition pooled by ``pool`` (:func:`pool_raw` or :func:`pool_ranges`, its
    arguments bound) to its ranges' rows (:func:`pooled_rows`; their tables too when
    ``keep``), the task's validation counts with its first range (or alone)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stats, runs = pool(batches)
        if not runs and stats:
            yield _pooled_batch(partition_id(), [-1] * len(stats), stats)
        for v in sorted(runs):
            yield from pooled_rows(v, fn, runs.pop(v).pop(), stats, weighted, chunk_rows,
                                   keep)
            stats = []

    return run


def _pooled_batch(rid: int, parts: list[int], payloads: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"rid": [rid] * len(parts), "part": parts,
                                       "payload": payloads}, schema=_POOLED_ARROW)


def pooled_rows(rid: int, fn: Callable[[KeyedTable], Any], table: KeyedTable,
                stats: list[bytes], weighted: bool, chunk_rows: int, keep: bool
                ) -> Iterator[pa.RecordBatch]:
    """A range as rows (rid, part, payload) of the pooled frame: validation counts (part
    -1, pickled, one row each), ``fn``'s outcome on its keyed table (part -2, pickled:
    :func:`_outcome`), then, when ``keep``, the table itself (:func:`table_payloads`,
    parts 0, 1, ...; none when empty)."""
    first = pickle.dumps(_outcome(fn, table), pickle.HIGHEST_PROTOCOL)
    yield _pooled_batch(rid, [-1] * len(stats) + [-2], [*stats, first])
    if keep and len(table.table):
        payloads = table_payloads(table, weighted, chunk_rows)
        yield _pooled_batch(rid, list(range(len(payloads))), payloads)


def table_payloads(kt: KeyedTable, weighted: bool, chunk_rows: int) -> list[bytes]:
    """A keyed table as payloads: its keys, their row offsets and 0/1 flags, pickled, then
    its sums as Arrow IPC streams of at most ``chunk_rows`` rows each. Unweighted, the
    weights, positives and sums of w^2 are not written (w = 1 makes them the counts and
    the label sums: :func:`table_from_payloads`)."""
    t = kt.table
    cols: dict[str, np.ndarray | None] = {"score": t.score, "count": t.count,
                                          "label_sum": t.label_sum}
    if weighted:
        cols.update(weight=t.weight, positives=t.positives)
    squares = kt.wyy is not None
    if squares:
        cols.update(wyy=kt.wyy, **({"ww": kt.ww} if weighted else {}))
    out = [pickle.dumps((kt.keys, kt.starts, kt.binary, weighted, squares),
                        pickle.HIGHEST_PROTOCOL)]
    # LZ4 about halves what the cache holds (the counts and label sums of distinct
    # scores are runs of small numbers) and is read back at ~5 ms per 10^6 rows.
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    for batch in pa.table(cols).to_batches(chunk_rows):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
            writer.write_batch(batch)
        out.append(sink.getvalue().to_pybytes())
    return out


def table_from_payloads(head: bytes, streams: list[pa.Table]) -> KeyedTable:
    """The keyed table :func:`table_payloads` wrote, as it was (no sort, no pooling)."""
    keys, starts, binary, weighted, squares = pickle.loads(head)
    data = pa.concat_tables(streams)

    def col(name: str) -> np.ndarray:
        return data.column(name).to_numpy()

    count, label_sum = col("count"), col("label_sum")
    ones = count.astype(np.float64)  # the sums of w and w^2 with w = 1
    table = DistinctTable(col("score"), col("weight") if weighted else ones,
                          col("positives") if weighted else label_sum, count, label_sum)
    return KeyedTable(keys, starts, table, binary, col("wyy") if squares else None,
                      (col("ww") if weighted else ones) if squares else None)


def table_runner(fn: Callable[[KeyedTable], Any]
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A partition of the pooled frame's tables (persisted; one range or, coalesced,
    several one after the other) to one row per range: its id and ``fn``'s result,
    pickled. A range's table is read back as written (:func:`table_from_payloads`);
    one range is held at a time."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rid, table in pooled_tables(batches):
            yield result_batch(rid, fn(table))

    return run


def narrow_runner(wanted: set[Key], weighted: bool, chunk_rows: int
                  ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A partition of the pooled frame's tables to the tables of the ``wanted`` keys only
    (nothing for a range without them)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rid, table in pooled_tables(batches):
            kept = table.only(wanted)
            if len(kept.table):
                payloads = table_payloads(kept, weighted, chunk_rows)
                yield _pooled_batch(rid, list(range(len(payloads))), payloads)

    return run


def pooled_tables(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, KeyedTable]]:
    """The ranges' keyed tables in a partition of the pooled frame's rows of parts >= 0,
    one range at a time (a coalesced partition reads its ranges one after the other)."""
    current: int | None = None
    done: set[int] = set()
    head = b""
    streams: list[pa.Table] = []
    for batch in batches:
        payloads = batch.column("payload")
        for i, (rid, part) in enumerate(zip(batch.column("rid").to_pylist(),
                                            batch.column("part").to_pylist())):
            if rid != current:
                if current is not None:
                    yield current, table_from_payloads(head, streams)
                    done.add(current)
                assert rid not in done, "a range's pooled rows are together"
                current, streams = rid, []
            if part == 0:
                head = payloads[i].as_py()
            else:
                streams.append(pa.ipc.open_stream(payloads[i].as_buffer()).read_all())
    if current is not None:
        yield current, table_from_payloads(head, streams)


def parts_runner(fn: Callable[[RowPart], Any], spec: KeySpec, finite_scores: bool,
                 n_classes: int | None, chunk_rows: int = CHUNK_ROWS
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``fn`` on each chunk of an input partition's valid rows; one row per partition."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stats: dict[str, Any] | None = None
        results = []
        for data in chunks(batches, chunk_rows):
            rows, st = read_rows(data, spec, finite_scores=finite_scores, n_classes=n_classes)
            stats = merge_stats(stats, st)
            if rows.n_rows:
                results.append(fn(rows))
        yield result_batch(0, {"stats": stats, "results": results})

    return run


# -- the driver ------------------------------------------------------------------------

def check_types(df: Any, spec: KeySpec) -> None:
    """A binary spec's columns of types Arrow cannot read as numbers (e.g. "date"), refused
    from the schema in Spark's words, before any job; a vector score only at score_index."""
    fields = fields_of(df)
    name, role = str(spec.score_col), "prob" if spec.probabilities else "score"
    if spec.score_index is not None and vector_array(df, name) is None:
        raise column_type(name, role, fields[name].simpleString(), VECTORS_EXPECTED)
    checked = [] if spec.score_index is not None else [(name, role)]
    if spec.target != "classes":  # discretize's labels are of any type
        checked.append((spec.label_col, spec.target))
    if spec.weight_col is not None:
        checked.append((spec.weight_col, "weight"))
    for col, role in checked:
        if column_kind(fields[col]) == "other":
            raise column_type(col, role, fields[col].simpleString())


def _vector_lengths(df: Any, spec: KeySpec) -> list[dict[int, int]]:
    """The vector score column's lengths over the input (``count_classes``; one small job),
    or the DataError of a column of another type."""
    name = str(spec.score_col)
    dtype = fields_of(df)[name]
    if vector_array(df, name) is None:
        raise not_vectors(name, dtype.simpleString())
    with phase("spark: vector lengths"):
        return [vector_length_counts(df, name)]


def input_rows(df: Any, spec: KeySpec) -> Any:
    """The columns of ``spec``, a ``VectorUDT`` score column as ``array<double>`` (JVM),
    a ``by`` column of TIMESTAMPs as the session's wall-clock times (:func:`.schema.
    wall_clock`)."""
    from pyspark.sql import functions as F

    fields = fields_of(df)
    cols = []
    for c in spec.columns:
        if is_vector_udt(fields[c]):
            cols.append(vector_array(df, c).alias(c))
        elif c in spec.by:
            cols.append(wall_clock(F.col(quote(c)), fields[c]).alias(c))
        else:
            cols.append(F.col(quote(c)))
    return df.select(*cols)


class SparkRanges(KeyedRanges):
    """What the Spark ranges share: frames persisted between passes, until :meth:`close`."""

    persisted: list[Any]

    def persist(self, df: Any) -> Any:
        """``df`` persisted (``MEMORY_AND_DISK``), unpersisted by :meth:`close`."""
        from pyspark import StorageLevel

        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.persisted.append(df)
        return df

    def close(self) -> None:
        for df in self.persisted:
            df.unpersist()
        self.persisted = []


class SparkKeyedRanges(SparkRanges):
    """The keyed rows of a Spark DataFrame in score ranges (module docstring)."""

    def __init__(self, df: Any, spec: KeySpec, *, on_invalid: str = "raise",
                 finite_scores: bool = False, passes: int = 1, n_ranges: int | None = None,
                 range_rows: int = RANGE_ROWS, sample_rows: int = SAMPLE_ROWS,
                 chunk_rows: int = CHUNK_ROWS):
        from pyspark.sql import types as T
        from pyspark.sql.pandas.types import to_arrow_schema

        if on_invalid not in ("raise", "drop"):
            raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
        check_columns(list(fields_of(df)), spec)  # read_rows' DataError
        if not spec.multiclass:
            check_types(df, spec)
        self.spec, self.on_invalid, self.finite_scores = spec, on_invalid, finite_scores
        self.passes, self.chunk_rows = passes, chunk_rows
        # K, and the vectors' length (read_rows needs it), counted over the input.
        self.n_classes, self.length = count_classes(spec, lambda: _vector_lengths(df, spec))
        self.classes = spec.classes(self.n_classes)
        self.rows_df = input_rows(df, spec)
        self.spark = self.rows_df.sparkSession
        self.result_bytes = result_bytes(self.spark)

        # The sample: the range count and bounds. A binary score in a given number of
        # ranges needs neither a count nor a sample: Spark's range partitioner cuts them.
        given = not spec.multiclass and bool(n_ranges)
        total = 0 if given else self.rows_df.count()
        per_row = len(self.classes)  # keyed rows per row, each counted under its own key
        hot_share = 0.0
        if given or (not spec.multiclass and total * per_row <= range_rows):
            # (All the keyed rows fit one range's budget: the least number of ranges.)
            self.bounds, self.distinct_estimate = np.zeros(0), float(total * per_row)
            self.k = int(n_ranges) if given and n_ranges else default_ranges(df)
        else:
            fraction = min(1.0, sample_rows / max(total * per_row, 1))
            sample = self.rows_df if fraction >= 1.0 else self.rows_df.sample(
                fraction=fraction, seed=20261203)
            # Each sampled batch's keyed rows: their scores and key hashes.
            runner = parts_runner(partial(_own_keys, classes=self.classes), spec,
                                  finite_scores, self.length, 1)
            with phase("spark: sampling the keyed rows for the range bounds"):
                parts = [r for _, p in collect_results(sample, runner) for r in p["results"]]
            s = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
            h = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.uint64)
            self.bounds, self.distinct_estimate, hot_share = ranges_for(
                s, h, fraction, range_rows, default_ranges(df), n_ranges)
            self.k = self.bounds.shape[0] + 1
        self.persisted = []
        self.pooled: Any = None
        self.pooled_read: Any = None
        self.rows_persisted = False
        self.checked = False
        # A binary score (with or without segments) needs no map side in Python:
        # Spark's own range partitioner on the score (its sampling job reads the
        # input in the JVM only); each range reads, explodes and pools its raw rows.
        self.raw = not spec.multiclass
        if self.raw:
            from pyspark.sql import functions as F

            name = str(spec.score_col)
            numeric = column_kind(fields_of(self.rows_df)[name]) == "number"
            # Ranges of the score as the workers read it, a double: scores distinct in
            # their own type but one double (decimals, longs beyond 2^53) in one range.
            if spec.score_index is not None:  # (a VectorUDT is an array here: input_rows)
                score = F.get(F.col(quote(name)), int(spec.score_index)).cast("double")
            else:
                score = F.col(quote(name)).cast("double") if numeric else F.expr(
                    f"try_cast({quote(name)} AS DOUBLE)")
            # Equal bounds collapse: a hot share h of the rows takes ~h of Spark's
            # row-quantile bounds, so ask for k / (1 - h) to keep k for the rest.
            self.k = max(1, int(math.ceil(self.k / max(1.0 - hot_share, 0.05)))) \
                if not n_ranges else int(n_ranges)
            self.ranged = self.rows_df.repartitionByRange(self.k, score)
            log.info("spark: raw rows in %d ranges by score (%s)", self.k,
                     "as given" if given else f"~{self.distinct_estimate:.3g} distinct (key, "
                     f"score) pairs, budget {range_rows} per range")
            return

        # The keyed rows, partitioned by range.
        fields = fields_of(self.rows_df)
        out = [T.StructField("_r", T.LongType()), T.StructField("_s", T.DoubleType()),
               T.StructField("_y", T.DoubleType())]
        if spec.weight_col is not None:
            out.append(T.StructField("_w", T.DoubleType()))
        self.per_class = self.classes != [None]
        if self.per_class:
            out.append(T.StructField("_c", T.LongType()))
        out += [T.StructField(f"_k{j}", fields[b]) for j, b in enumerate(spec.by)]
        out.append(T.StructField("_st", T.BinaryType()))
        spark_schema = T.StructType(out)
        arrow_schema = to_arrow_schema(T.StructType([f for f in out
                                                     if not f.name.startswith("_k")]))
        keyed = map_in_arrow(self.rows_df, row_runner(
            spec, finite_scores, self.length, self.classes, self.bounds, arrow_schema),
            spark_schema)
        self.ranged = self._partitioned(keyed)  # (passes > 1: pooled once, then kept)
        log.info("spark: keyed rows in %d ranges (~%.3g distinct (key, score) pairs, budget "
                 "%d per range)", self.k, self.distinct_estimate, range_rows)

    def _partitioned(self, keyed: Any) -> Any:
        from pyspark.sql import functions as F

        if self.k == 1:
            return keyed.repartition(1)
        ids = partition_ids(self.spark, self.k)
        target = F.get(F.array(*[F.lit(i) for i in ids]), F.col("_r").cast("int"))
        return keyed.repartition(self.k, target)

    def _check(self, stats: list[dict[str, Any]]) -> None:
        if self.checked:
            return
        self.add_up(stats, self.on_invalid, "spark")
        self.checked = True

    def map(self, fn: Callable[[KeyedTable], Any]) -> list[Any]:
        """``fn``'s results on the non-empty ranges, ascending. Each range is pooled
        (:func:`pool_runner`; one job); with ``passes > 1`` the first map persists the
        pooled ranges and the JVM reads its results back from them (no Python task reads
        the ranges again), and later maps read their tables (:func:`table_runner`)."""
        from pyspark.sql import functions as F

        if self.pooled is not None:
            with phase("spark: one keyed pass over %d ranges", self.k):
                return [p for _, p in collect_results(self.pooled_read, table_runner(fn))]
        spec, keep = self.spec, self.passes > 1
        # Pooled tables of a per-row loss carry sum |w z| apart from sum w z (the
        # positives), which unweighted payloads would read off the label sums.
        weighted = spec.weight_col is not None or spec.pool_magnitudes
        pool = partial(pool_raw, spec=spec, finite_scores=self.finite_scores,
                       chunk_rows=self.chunk_rows) if self.raw else partial(
            pool_ranges, n_by=len(spec.by), weighted=spec.weight_col is not None,
            per_class=self.per_class, chunk_rows=self.chunk_rows,
            magnitudes=spec.pool_magnitudes)
        frame = map_in_arrow(self.ranged, pool_runner(fn, pool, weighted, self.chunk_rows,
                                                      keep), POOLED_SCHEMA)
        if keep:
            pooled = self.pooled = self.persist(frame)
            frame = pooled.where(F.col("part") < 0)
        with phase("spark: one keyed pass over %d ranges" + (", pooled and persisted"
                                                             if keep else ""), self.k):
            got = with_arrow_batches(self.spark, frame.collect)
        stats, first = [], {}
        for r in got:
            if r["part"] == -1:
                stats.append(pickle.loads(r["payload"]))
            else:
                first[int(r["rid"])] = pickle.loads(r["payload"])
        self._check(stats)
        if keep:
            # A pass over the pooled ranges is mostly a task's fixed cost (~0.1 s: 51 ranges
            # of 1e7 distinct scores took 2.7 s on 2 cores), so later passes read several
            # ranges per task (coalesce reads its partitions one after the other).
            self.pooled_read = pooled.where(F.col("part") >= 0).coalesce(
                min(self.k, default_ranges(self.rows_df)))
        return [first[v]["result"] for v in sorted(first) if not first[v]["empty"]]

    def narrow(self, keys: Collection[Key]) -> None:
        if self.pooled is None:  # (one pass: nothing kept)
            return
        runner = narrow_runner(set(keys), self.spec.weight_col is not None, self.chunk_rows)
        # Computed and kept by the next pass; the ranges before stay kept until close.
        self.pooled_read = self.persist(map_in_arrow(self.pooled_read, runner,
                                                       POOLED_SCHEMA))
        log.info("spark: later passes read the rows of %d keys", len(keys))

    def map_rows(self, fn: Callable[[RowPart], Any]) -> list[Any]:
        if self.passes > 1 and not self.rows_persisted:
            self.rows_df = self.persist(self.rows_df)
            self.rows_persisted = True
        runner = parts_runner(fn, self.spec, self.finite_scores, self.length, self.chunk_rows)
        with phase("spark: one pass over the rows"):
            parts = [p for _, p in collect_results(self.rows_df, runner)]
        self._check([p["stats"] for p in parts if p["stats"] is not None])
        return [res for p in parts for res in p["results"]]
