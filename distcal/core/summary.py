"""Summaries as tables, and summaries as a keyed input: what every engine reads.

A summary (:mod:`distcal.summary`) is the keyed table that a fit's pass
pools (:mod:`distcal.core.keyed`), written out: one row per (key, distinct
score) with the sums

    weight = sum w,  positives = sum w y,  wyy = sum w y^2,  ww = sum w^2,
    count = rows,    label_sum = sum y,    nonbinary = some y not in {0, 1}

and the key as ``by_0, by_1, ...`` (the values of the ``by`` columns; all
null for the key of all rows, since a segment never has a null value).
Pooling commutes, so the rows of several summaries, pooled again by (key,
score), are the summary of the union of their rows (:func:`keyed_from_arrow`
does both), and a fit reads such pre-pooled rows exactly as it reads the
pooled rows of its own pass: the engines open a :class:`SummarySource` as
they open rows (:meth:`~distcal.engines.base.Engine.open_keyed`), and every
plan runs unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import DataError
from .distinct import DistinctTable
from .keyed import GLOBAL, Key, KeyedTable, KeySpec, factorize_keys, pool_sums, sorted_sample
from .rows import problems_message

__all__ = ["FIELDS", "SummarySource", "moved_fields", "by_name", "keyed_from_arrow",
           "arrow_from_keyed", "SCORE_SAMPLE_KEY", "score_sample", "stored_sample",
           "round_keyed", "check_keyed", "global_totals", "summary_keyed"]

# The sums of a summary row, in the order of its Parquet table (after the key).
FIELDS = ("score", "weight", "positives", "wyy", "ww", "count", "label_sum", "nonbinary")
# The key of a saved summary table's Parquet metadata that holds its score sample
# (:func:`score_sample`, little-endian float64): a refit on a cluster sets its
# range bounds from the samples of the files' footers, with no sampling job.
SCORE_SAMPLE_KEY = b"distcal.score_sample"
# The rows and weight of the key of all rows, counted with the problems (they must add up
# to the metadata's n_rows and weight_total), and those dropped (on_invalid="drop").
_ROWS, _WEIGHT, _DROPPED, _DROPPED_WEIGHT = "_rows", "_weight", "_dropped", "_dropped_weight"


def score_sample(table: pa.Table) -> np.ndarray:
    """An evenly spaced sample of the sorted scores of a summary table's rows (all
    keys): 256 values, or one per 4,096 rows for larger tables."""
    score = np.sort(table.column("score").to_numpy())
    return sorted_sample(score, max(256, score.shape[0] // 4096))


def stored_sample(raw: bytes, rows: int, where: str) -> np.ndarray:
    """A score sample read back from a file's metadata, checked (ModelError)."""
    from ..errors import ModelError

    sample = np.frombuffer(raw, dtype="<f8") if len(raw) % 8 == 0 else None
    if (sample is None or sample.shape[0] > rows or (rows and not sample.shape[0])
            or np.isnan(sample).any() or np.any(sample[1:] < sample[:-1])):
        raise ModelError(f"'{where}' is damaged: its score sample is not {rows} rows' "
                         "sorted scores")
    return sample.astype(np.float64)


def by_name(j: int) -> str:
    """The table column of the j-th ``by`` column's values."""
    return f"by_{j}"


def _key_codes(table: pa.Table | pa.RecordBatch, n_by: int) -> tuple[np.ndarray, list[Key]]:
    """Each summary row's key, as a code into the list of keys (0: the key of all rows)."""
    keys: list[Key] = [(GLOBAL, None)]
    if not n_by:
        return np.zeros(table.num_rows, dtype=np.int64), keys
    seg, seg_keys = factorize_keys([table.column(by_name(j)) for j in range(n_by)])
    keys += [(s, None) for s in seg_keys]
    return seg + 1, keys  # -1 (a null key value: the key of all rows) becomes 0


def _written_runs(codes: np.ndarray, score: np.ndarray) -> np.ndarray | None:
    """Where each key's rows start, if the rows are as :meth:`~distcal.Summary.save` writes
    a table (each key's rows together, in any order of the keys, its scores strictly
    increasing); None otherwise, or for no rows."""
    if not codes.shape[0]:
        return None
    step = np.diff(codes)
    new = np.flatnonzero(np.r_[True, step != 0])
    if np.unique(codes[new]).shape[0] == new.shape[0] and np.all((np.diff(score) > 0)
                                                                   | (step != 0)):
        return new
    return None


def check_written_order(batches: Iterable[pa.Table | pa.RecordBatch], n_by: int) -> None:
    """``ValueError`` unless one saved table's rows, read in order a batch at a time, are
    as :meth:`~distcal.Summary.save` writes them (:func:`_written_runs`, across batches
    too). A (key, score) pair listed twice breaks that order; pooled, it would be merged
    into one row without a word (two segments renamed to one, say). Holds the keys seen,
    not the rows."""
    done: set[Key] = set()
    last: tuple[Key, float] | None = None  # the key and score of the previous batch's end
    for batch in batches:
        if not batch.num_rows:
            continue
        codes, keys = _key_codes(batch, n_by)
        score = np.asarray(batch.column("score").to_numpy(zero_copy_only=False),
                           dtype=np.float64) + 0.0
        new = _written_runs(codes, score)
        runs = [] if new is None else [keys[c] for c in codes[new].tolist()]
        if runs and last is not None and runs[0] == last[0]:
            ok, later = bool(score[0] > last[1]), runs[1:]
        else:
            ok, later = new is not None, runs
            if last is not None:
                done.add(last[0])
        if not ok or any(k in done for k in later):
            raise ValueError("its rows are not as Summary.save writes them (a (key, score) "
                             "pair listed twice, or a key's scores out of order)")
        done.update(runs[:-1])
        last = (runs[-1], float(score[-1]))


def keyed_from_arrow(table: pa.Table | pa.RecordBatch, n_by: int) -> KeyedTable:
    """Summary rows (any number of summaries' rows, any order) pooled by (key, score)."""
    n = table.num_rows
    codes, keys = _key_codes(table, n_by)

    def col(name: str, dtype: Any) -> np.ndarray:
        return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=dtype)

    score = col("score", np.float64) + 0.0  # -0.0 and 0.0 are one score
    count = col("count", np.int64)
    label_sum = col("label_sum", np.float64)
    names = set(table.column_names)
    # Cluster engines move only what the pass needs (:func:`moved_fields`): the sums of
    # w y^2 and w^2 only for evaluations, and for rows without weights (w = 1) neither
    # sum w (the rows) nor sum w y (the labels' sum) nor sum w^2 (the rows again).
    weight = col("weight", np.float64) if "weight" in names else count.astype(np.float64)
    positives = col("positives", np.float64) if "positives" in names else label_sum
    wyy = col("wyy", np.float64) if "wyy" in names else None
    ww = (None if wyy is None else col("ww", np.float64) if "ww" in names
          else count.astype(np.float64))
    nonbinary = col("nonbinary", bool)
    new = _written_runs(codes, score)
    if new is not None:
        # One table as written (each key's rows contiguous, in any order of the keys, its
        # scores strictly increasing): it is pooled already; only its keys' bounds are
        # needed (a merge of many, or a Spark pass over a range's pooled table, skips a sort).
        binary = np.logical_or.reduceat(nonbinary, new) == 0
        return KeyedTable([keys[int(c)] for c in codes[new]], np.append(new, n),
                          DistinctTable(score, weight, positives, count, label_sum,
                                        bool(binary.all())),
                          binary, wyy, ww)
    return pool_sums(codes, keys, score, weight, positives, count, label_sum, nonbinary,
                     wyy, ww)


def moved_fields(weighted: bool, squares: bool) -> list[str]:
    """The summary columns a pass over summaries reads (:func:`keyed_from_arrow` makes the
    others from them): without weights, w = 1 makes sum w and sum w^2 the row count and
    sum w y the labels' sum; the sums of squares only when the pass pools them."""
    left_out = set() if squares else {"wyy", "ww"}
    if not weighted:
        left_out |= {"weight", "positives", "ww"}
    return [f for f in FIELDS if f not in left_out]


def arrow_from_keyed(kt: KeyedTable, n_by: int) -> pa.Table:
    """The summary table of a keyed table: its ``by_j`` columns (of the types Arrow infers
    from the values) and every sum of :data:`FIELDS` (the keyed table pooled the sums of
    w y^2 and w^2; :func:`moved_fields` names the ones :func:`keyed_from_arrow` cannot make
    from the others)."""
    assert kt.wyy is not None and kt.ww is not None, "the sums of w y^2 and w^2 are pooled"
    kt = _canonical(kt)
    codes, _, t, _ = kt.rows()
    cols: dict[str, Any] = {}
    for j in range(n_by):
        values = pa.array([None if seg is GLOBAL else seg[j] for seg, _ in kt.keys])
        cols[by_name(j)] = values.take(pa.array(codes))
    # A key's flag on each of its rows: pooled again, the key is binary iff none is set.
    sums = {"score": t.score, "weight": t.weight, "positives": t.positives, "wyy": kt.wyy,
            "ww": kt.ww, "count": t.count.astype(np.int64), "label_sum": t.label_sum,
            "nonbinary": ~kt.binary[codes]}
    cols.update(sums)
    return pa.table(cols)


def _canonical(kt: KeyedTable) -> KeyedTable:
    """The keys in one order whatever the engine: all rows first, then the segments sorted
    (by their text where values of mixed types do not sort)."""
    segs = [k[0] for k in kt.keys]
    order = sorted(range(len(segs)), key=lambda i: (segs[i] is not GLOBAL, segs[i] or ()))\
        if _sortable(segs) else sorted(range(len(segs)), key=lambda i: (
            segs[i] is not GLOBAL, repr(segs[i])))
    return kt if order == list(range(len(segs))) else kt.take(order)


def _sortable(segs: list[Any]) -> bool:
    try:
        sorted(s for s in segs if s is not GLOBAL)
    except TypeError:
        return False
    return True


def round_keyed(kt: KeyedTable, decimals: int | None) -> KeyedTable:
    """Every score rounded to ``decimals`` (numpy's ``round``), pooled again by (key, score).

    Scores of 2^52 or more in magnitude are integers already and kept: numpy rounds
    s * 10^d, which overflows to inf for the largest finite scores.
    """
    if decimals is None or not len(kt.table):
        return kt
    codes, keys, t, _ = kt.rows()
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = np.where(np.abs(t.score) < 2.0**52, np.round(t.score, decimals), t.score)
    return pool_sums(codes, keys, rounded, t.weight, t.positives,
                     t.count, t.label_sum, ~kt.binary[codes], kt.wyy, kt.ww)


def summary_keyed(batch: pa.Table, n_by: int) -> KeyedTable:
    """:func:`keyed_from_arrow` of a batch of saved summary rows, checked (:func:`check_keyed`:
    a :class:`~distcal.ModelError` names what is wrong)."""
    from ..errors import ModelError

    try:
        nulls = [f for f in FIELDS if f in batch.column_names and batch.column(f).null_count]
        if nulls:  # (before the sums are cast to numpy, which would make them numbers)
            raise ValueError(f"column {nulls[0]!r} has nulls")
        kt = keyed_from_arrow(batch, n_by)
        check_keyed(kt)
    except (KeyError, TypeError, ValueError, pa.ArrowException) as exc:
        raise ModelError(f"a summary table is damaged: {str(exc)[:300]}") from exc
    return kt


def _without_rows(kt: KeyedTable, bad: np.ndarray) -> KeyedTable:
    """``kt`` without the table rows ``bad`` (of any key), and without keys left empty."""
    kept = np.concatenate(([0], np.cumsum(~bad)))[kt.starts]
    sizes = np.diff(kept)
    keys = np.flatnonzero(sizes)
    return kt.take(keys, np.flatnonzero(~bad), np.concatenate(([0], np.cumsum(sizes[keys]))))


def check_keyed(kt: KeyedTable) -> None:
    """``ValueError`` for sums no rows can have (a damaged or foreign summary table)."""
    t = kt.table
    w, y = t.weight, t.positives
    slack = 1e-9 * np.abs(w)
    bad = ((np.isnan(t.score)) | ~np.isfinite(w) | (w <= 0) | ~np.isfinite(y) | (y < -slack)
           | (y > w + slack) | (t.count < 1) | ~np.isfinite(t.label_sum)
           | (t.label_sum < 0) | (t.label_sum > t.count))
    if kt.wyy is not None and kt.ww is not None:  # (when read: a fit may leave them out)
        q, ww = kt.wyy, kt.ww
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            # Cauchy-Schwarz over the rows of a (key, score): sum w y^2 >= (sum w y)^2 / sum w
            # and sum w^2 >= (sum w)^2 / rows (to the rounding of long sums, and of
            # subnormal squares); and y^2 = y for 0/1 labels.
            low_q = (y / w) * y * (1 - 1e-6) - 2.0**-960
            low_ww = (w / t.count) * w * (1 - 1e-6) - 2.0**-960
        binary = np.repeat(kt.binary, np.diff(kt.starts))
        bad |= (~np.isfinite(q) | (q < -slack) | (q > y + slack) | ~np.isfinite(ww)
                | (ww <= 0) | (q < low_q) | (ww < low_ww) | (binary & (np.abs(q - y) > slack)))
    if bad.any():
        raise ValueError(f"{int(bad.sum())} summary rows hold sums no rows can have "
                         "(NaN score, weight <= 0, positives outside [0, weight], ...)")


def global_totals(kt: KeyedTable) -> tuple[int, float]:
    """Rows and weight of the key of all rows."""
    g = kt.global_index()
    if g is None:
        return 0, 0.0
    t = kt.key_table(g)
    return int(t.count.sum()), float(t.weight.sum())


@dataclass(frozen=True)
class SummarySource:
    """Summaries opened as a keyed input (:meth:`~distcal.engines.base.Engine.open_keyed`).

    ``tables``: summary tables in memory; ``files``: Parquet files of saved
    summaries (their directories already checked); both hold summary rows
    (module docstring) of the same ``columns`` (score, label, weight) and
    ``by``. ``n_rows``, ``weight_total`` and ``dropped_rows``: of all of
    them together. A summary holds no rows, so what needs the rows
    themselves (temperature scaling, Spearman's sign of fractional labels)
    cannot run on it (:meth:`no_rows`).
    """

    columns: dict[str, str | None]
    by: tuple[str, ...]
    tables: tuple[pa.Table, ...]
    files: tuple[str, ...]
    n_rows: int
    weight_total: float
    dropped_rows: int

    def own_columns(self, caller: str, **given: tuple[Any, Any]
                    ) -> tuple[str, str, str | None, list[str] | None]:
        """The summaries' score, label and weight columns and ``by``, for ``caller`` on them.

        ``given``: each argument's (value, default) by name (``score_col`` or
        ``prob_col``, ``label_col``, ``weight_col``, ``by``). One that names other
        columns than the summaries' is a :class:`~distcal.ParameterError`: a summary
        holds no others (it would be ignored, e.g. a weighted or segmented fit asked of
        summaries of unweighted rows of no segments).
        """
        from ..errors import ParameterError

        score, label, weight = (str(self.columns["score"]), str(self.columns["label"]),
                                self.columns["weight"])
        own: dict[str, Any] = {"score": score, "label": label, "weight": weight,
                               "by": list(self.by)}
        roles = {"score_col": "score", "prob_col": "score", "label_col": "label",
                 "weight_col": "weight", "by": "by"}
        for arg, (value, default) in given.items():
            if value is None or value == default:
                continue
            if arg == "by":
                value = [value] if isinstance(value, str) else list(value)
            if value != own[roles[arg]]:
                raise ParameterError(
                    f"{caller}: {arg}={value!r}, but the summaries hold the rows of score "
                    f"{own['score']!r}, label {own['label']!r}, weight {own['weight']!r} and "
                    f"by {own['by']}: leave {arg} out (a summary holds no other columns)")
        return score, label, weight, list(self.by) or None

    def columns_read(self, spec: KeySpec) -> list[str]:
        """The summary columns a pass of ``spec`` reads (:func:`moved_fields`)."""
        return [by_name(j) for j in range(len(self.by))] + moved_fields(
            self.columns["weight"] is not None, spec.pool_squares)

    def batches(self, batch_rows: int, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """Every summary's rows (``columns`` of them, default all), at most ``batch_rows``
        at a time (files streamed)."""
        import pyarrow.parquet as pq

        for t in self.tables:
            t = t if columns is None else t.select(columns)
            for start in range(0, t.num_rows, batch_rows):
                yield t.slice(start, batch_rows)
        for f in self.files:
            reader = pq.ParquetFile(f)
            for batch in reader.iter_batches(batch_size=batch_rows, columns=columns):
                yield pa.Table.from_batches([batch])

    def score_samples(self) -> list[tuple[np.ndarray, int]] | None:
        """Each table's and file's score sample (:func:`score_sample`) and rows, for
        :func:`~distcal.core.keyed.range_bounds`; None if a file has no sample
        (saved before summaries carried one). Files: from their footers only."""
        import pyarrow.parquet as pq

        out = []
        for f in self.files:  # first: a file without a sample makes the tables' moot
            meta = pq.ParquetFile(f).metadata
            raw = (meta.metadata or {}).get(SCORE_SAMPLE_KEY)
            if raw is None:
                return None
            out.append((stored_sample(raw, meta.num_rows, f), meta.num_rows))
        return out + [(score_sample(t), t.num_rows) for t in self.tables]

    def read_piece(self, piece: pa.Table, spec: KeySpec, finite_scores: bool,
                   problems: list[dict[str, float]], drop: bool = False) -> KeyedTable:
        """A piece of the summaries' rows (a batch of :meth:`batches`, a range's chunk, a
        file's row groups) pooled by (key, score) and checked (:func:`summary_keyed`); its
        problems (:meth:`problems`) are appended to ``problems``, which the engines add up
        over the pieces with :meth:`add_up` (pieces are read one at a time). ``drop``
        (``on_invalid="drop"``): the rows of the scores with problems leave every key's
        table, and count as dropped instead."""
        part = summary_keyed(piece, len(spec.by))
        counts, bad = self.problems(part, spec, finite_scores)
        if drop and bad.any():
            # (a piece may hold a segment's rows without the key of all rows, which counts
            # them where it is: every piece drops its rows, only that key's are counted)
            g = part.global_index()
            lo, hi = (0, 0) if g is None else (part.starts[g], part.starts[g + 1])
            t, bad_g = part.table, bad[lo:hi]
            counts = {**{k: v for k, v in counts.items() if k.startswith("_")},
                      _DROPPED: int(t.count[lo:hi][bad_g].sum()),
                      _DROPPED_WEIGHT: float(t.weight[lo:hi][bad_g].sum())}
            part = _without_rows(part, bad)
        problems.append(counts)
        return part

    def problems(self, kt: KeyedTable, spec: KeySpec, finite_scores: bool
                 ) -> tuple[dict[str, float], np.ndarray]:
        """The rows of a part of the summaries that a fit or evaluation of the summarised
        rows would refuse, by problem (added up over the parts, :meth:`add_up`), and the
        mask of the table's rows (of every key) of their scores.

        Counted over the key of all rows (every row is in it once):
        infinite scores for methods that need finite ones, and scores outside
        [0, 1] when they are evaluated as probabilities.
        """
        s = kt.table.score
        checks = []
        if finite_scores:
            checks.append(("are infinite (this method needs finite scores)", np.isinf(s)))
        if spec.probabilities:
            checks.append(("are outside [0, 1] (evaluated as probabilities)", (s < 0) | (s > 1)))
        bad = np.zeros(len(s), bool)
        for _, mask in checks:
            bad |= mask
        g = kt.global_index()
        if g is None:
            return {}, bad
        rows = slice(int(kt.starts[g]), int(kt.starts[g + 1]))
        n = kt.table.count[rows]
        out: dict[str, float] = {_ROWS: int(n.sum()), _WEIGHT: float(kt.table.weight[rows].sum())}
        for problem, mask in checks:
            out[problem] = int(n[mask[rows]].sum())
        return out, bad

    @staticmethod
    def refused(parts: list[dict[str, float]]) -> bool:
        """Whether the parts have rows the method refuses (then nothing is computed)."""
        return any(k for p in parts for name, k in p.items() if not name.startswith("_"))

    def add_up(self, parts: list[dict[str, float]]) -> tuple[int, float, int]:
        """The rows, weight and dropped rows of the summarised rows used, from the parts'
        counts; the ``DataError`` naming the score column, each problem and its rows, if
        any (and ``ModelError`` when the tables' rows or weight are not those the metadata
        states)."""
        total: dict[str, float] = {}
        for p in parts:
            for problem, k in p.items():
                total[problem] = total.get(problem, 0) + k
        weight = total.pop(_WEIGHT, 0.0)
        if total.pop(_ROWS, 0) != self.n_rows or not math.isclose(
                weight, self.weight_total, rel_tol=1e-9, abs_tol=1e-12):
            from ..errors import ModelError

            raise ModelError("a summary is damaged: its table's rows or weight differ from "
                             "those its metadata states")
        dropped, dropped_weight = int(total.pop(_DROPPED, 0)), total.pop(_DROPPED_WEIGHT, 0.0)
        message = problems_message([(str(self.columns["score"]), p, int(k))
                                    for p, k in total.items()])
        if message:
            raise DataError(message + " (pass on_invalid='drop' to drop such rows)")
        return (self.n_rows - dropped, self.weight_total - dropped_weight,
                self.dropped_rows + dropped)

    def no_rows(self, what: str = "this") -> DataError:
        return DataError(f"a summary holds no rows, and {what} needs them: fit the rows "
                         "themselves, or (isotonic) pass increasing=True or False")
