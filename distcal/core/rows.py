"""Reading rows: scores (one or per class), labels, weights and segments, with their problems.

Every engine reads every part of its input with the same code
(:func:`read_rows`, which also reads per-class scores), so that
every engine reports the same problems in the same words. Per-class
scores come from one vector column (a pandas column of numpy arrays or
lists, a pyarrow list or fixed-size list) or from one column per class; K
is the most common vector length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DataError, sums_overflow
from .columns import arrow_kind, column_to_float, is_list_type, vector_element
from .distinct import is_binary
from .multiclass import label_problems

__all__ = ["vector_lengths", "problems_message", "Problems", "read_scores", "LabelsNotBinaryError",
           "check_score_args", "RowPart", "group_by_code", "count_classes",
           "read_rows", "add_up_rows", "RowTotals", "check_columns", "merge_stats", "read_score"]

# ---------------------------------------------------------------------------

class Problems:
    """Row problems per column, counted once per row and problem."""

    def __init__(self, n: int):
        self.bad = np.zeros(n, dtype=bool)
        self.items: list[tuple[str, str, int]] = []

    def add(self, column: str, problem: str, mask: np.ndarray) -> None:
        # Every check is recorded, also with count 0, so that the counts of
        # partitions (cluster engines) add up item by item in one order.
        k = int(np.count_nonzero(mask))
        self.items.append((column, problem, k))
        if k:
            self.bad |= mask

    def check(self, column: str, role: str, values: np.ndarray, text: np.ndarray | None = None,
              finite_scores: bool = False) -> None:
        """Add the rows of ``values`` (float64, null as NaN) that break the rules of ``role``
        (:func:`distcal.core.validate.rules`); ``text`` marks the rows that held text."""
        from .validate import rules

        if text is None:
            text = np.zeros(values.shape[0], dtype=bool)
        for problem, mask in rules(role, values, text, finite_scores):
            self.add(column, problem, mask)

    def message(self, noun: str = "column") -> str:
        return problems_message(self.items, noun)


def problems_message(items: list[tuple[str, str, int]], noun: str = "column") -> str:
    """``column 'c': 3 rows are ...; ...`` for the problems with a count above 0 (``noun``
    names what 'c' is)."""
    parts = []
    for column, problem, k in items:
        if not k:
            continue
        if k == 1:  # the verb agrees with "1 row"
            for plural, singular in (("are ", "is "), ("have ", "has "), ("contain ", "contains ")):
                if problem.startswith(plural):
                    problem = singular + problem[len(plural):]
                    break
        parts.append(f"{noun} '{column}': {k} {'row' if k == 1 else 'rows'} {problem}")
    return "; ".join(parts)


class InvalidRowsError(DataError):
    """Rows of a part that cannot be read, as ``items`` of (column, problem, count):
    a reader of many parts adds up every part's (:meth:`plus`) to count the whole input."""

    def __init__(self, items: list[tuple[str, str, int]]):
        self.items = [(c, p, k) for c, p, k in items if k]
        super().__init__(problems_message(self.items))

    def __reduce__(self) -> tuple[Any, ...]:  # raised in Spark and Dask workers: picklable
        return type(self), (self.items,)

    def plus(self, other: InvalidRowsError) -> InvalidRowsError:
        totals: dict[tuple[str, str], int] = {}
        for c, p, k in [*self.items, *other.items]:
            totals[c, p] = totals.get((c, p), 0) + k
        return InvalidRowsError([(c, p, k) for (c, p), k in totals.items()])


class LabelsNotBinaryError(DataError):
    """Labels other than 0/1 reached a method that takes 0/1 labels only (Venn-Abers,
    MODL), found in pooled tables (of summaries: rows are checked as they are read,
    ``KeySpec.zero_one_labels``); the fit says what the method ``needs``."""

    def __init__(self, message: str, needs: str):
        super().__init__(message)
        self.needs = needs

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.needs)


def read_score(part: pd.DataFrame | pa.Table, name: str, index: int | None = None
               ) -> np.ndarray:
    """The binary score of every row of ``part`` as float64 (null -> NaN), to predict.

    ``index``: the score is that element of the vectors in ``name`` (their
    lengths checked over ``part``). Text, or a column of another type, is a
    :class:`DataError`; NaN and infinite scores are left to the model.
    """
    if index is not None:
        from .validate import check_vector_lengths

        values, lengths = vector_element(part[name], index, name)
        check_vector_lengths(name, "score", index, lengths)
        return values
    values, text = column_to_float(part, name, "score")
    k = int(np.count_nonzero(text))
    if k:
        raise InvalidRowsError([(name, "are text, not numbers", k)])
    return values


def _arrow_column(data: pd.DataFrame | pa.Table, name: str) -> pa.Array:
    """Column ``name`` as one Arrow array (a pandas column converted by Arrow, which
    names the problem of a column it cannot convert)."""
    if isinstance(data, pd.DataFrame):
        try:
            col = pa.array(data[name], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise DataError(f"column '{name}' does not hold numeric vectors: {exc}") from exc
    else:
        col = data.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def not_vectors(name: str, type_name: str) -> DataError:
    """The ``DataError`` of a multiclass score column that does not hold vectors."""
    return DataError(f"column '{name}' has type {type_name}; expected a vector (list) of "
                     "numbers per row, or pass one column per class as score_cols")


def _as_lists(col: pa.Array, name: str) -> pa.Array:
    """A list, large list or fixed-size list array as a list array, else a DataError."""
    if not is_list_type(col.type):
        raise not_vectors(name, str(col.type))
    return col if pa.types.is_list(col.type) else pc.cast(col, pa.list_(col.type.value_type))


def _numpy_vectors(s: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, lengths) of a pandas column of 1-d numpy arrays only, else None.

    A column of numpy arrays (``list(matrix)``, ``predict_proba``'s rows) is
    read without Arrow: converting it takes longer than the fit's pooling.
    Other columns (lists, None, text, arrays of other shapes) are Arrow's,
    which names their problems.
    """
    if s.dtype != object:  # (an Arrow-backed column is read as Arrow, not converted here)
        return None
    vals = s.to_numpy()
    if not len(vals) or not isinstance(vals[0], np.ndarray) \
            or set(map(type, vals)) != {np.ndarray} or vals[0].ndim != 1:
        return None
    return vals, np.fromiter(map(len, vals), dtype=np.intp, count=len(vals))


def _vector_column(data: pd.DataFrame | pa.Table, name: str, length: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A vector column of numbers (booleans are 0 and 1, as in a score column) as an (n, K)
    float64 matrix, K the most common length.

    Returns (matrix, null-row mask, ragged-row mask); null and ragged rows
    are NaN in the matrix. ``length`` imposes K (a cluster engine counts the
    lengths over all partitions first, :func:`vector_lengths`).
    """
    if isinstance(data, pd.DataFrame):
        arrays = _numpy_vectors(data[name])
        if arrays is not None and length in (None, arrays[0][0].shape[0]):
            # Fast path: numeric vectors all of length K concatenate into the
            # (n, K) matrix (np.stack would make a 2-d view of each row first,
            # twice as slow); anything else (None, ragged, text, other shapes)
            # goes the Arrow way, which counts problems.
            vals, lens = arrays
            k = vals[0].shape[0]
            m: np.ndarray | None = None
            if (lens == k).all():
                try:
                    m = np.concatenate(vals).reshape(len(vals), k)
                except ValueError:
                    m = None
            if m is not None and m.ndim == 2 and m.dtype.kind in "fiub":
                z = np.zeros(len(vals), bool)
                return m.astype(np.float64, copy=False), z, z
    col = _arrow_column(data, name)
    if pa.types.is_null(col.type):  # no value at all (an empty part): null vectors
        col = pa.nulls(len(col), type=pa.list_(pa.float64()))
    col = _as_lists(col, name)
    vt = col.type.value_type
    if arrow_kind(vt) != "number":
        raise DataError(f"column '{name}' holds vectors of {vt}; expected numbers")
    n = len(col)
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    null = np.isnan(lengths.astype(np.float64)) if lengths.dtype.kind == "f" \
        else np.zeros(n, bool)
    if col.null_count:
        null = np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
    lens = np.where(null, 0, np.nan_to_num(lengths.astype(np.float64))).astype(np.int64)
    flat = pc.cast(pc.list_flatten(col), pa.float64()).to_numpy(zero_copy_only=False)
    flat = np.asarray(flat, dtype=np.float64)
    present = lens[~null]
    k = length if length is not None else (
        int(np.bincount(present).argmax()) if present.size else 0)
    bad_length = ~null & (lens != k)
    out = np.full((n, max(k, 1)), np.nan)
    good = ~null & ~bad_length
    if k and good.all():
        out = flat.reshape(n, k)
    elif k and good.any():
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])[good]
        out[good] = flat[starts[:, None] + np.arange(k)]
    return out, null, bad_length


def vector_lengths(data: pd.DataFrame | pa.Table, name: str) -> np.ndarray:
    """``bincount`` of the lengths of the non-null vectors of column ``name``.

    Partitions' counts add up; K is the most common length (``argmax``).
    """
    if isinstance(data, pd.DataFrame):
        arrays = _numpy_vectors(data[name])
        if arrays is not None and all(v.ndim == 1 and v.dtype.kind in "fiub"
                                      for v in (arrays[0][0], arrays[0][-1])):
            # (an array of other numbers or dimensions further on: read_rows refuses it)
            return np.bincount(arrays[1], minlength=1)
    col = _as_lists(_arrow_column(data, name), name)
    lengths = pc.list_value_length(col).drop_null().to_numpy(zero_copy_only=False)
    return np.bincount(lengths.astype(np.int64), minlength=1)


def count_classes(spec: Any, lengths: Callable[[], Iterable[np.ndarray | Mapping[int, int]]]
                  ) -> tuple[int, int | None]:
    """K of a spec (0: a binary score), and the vector length :func:`read_rows` is given.

    ``spec`` is a :class:`~distcal.core.keyed.KeySpec`. ``score_cols``: one
    column per class (one column: class 1's score of a binary problem, K =
    2). A vector column: ``lengths()`` (called only then) counts its non-null
    vectors by length over the whole input, in parts that add up (each an
    engine's own count: a :func:`vector_lengths` ``bincount``, or a mapping
    length -> vectors). K is the most common length (ties to the shortest),
    and the vectors are read at that length (``n_classes`` of
    :func:`read_rows`; None but for a vector column); vectors of one score
    are class 1's of a binary problem (K = 2, read at length 1). No vector
    at all: K = 0 (reading the rows says why: null rows, or none); vectors of
    length 0: nothing to calibrate, a :class:`DataError`.
    """
    if not spec.multiclass:
        return 0, None
    if spec.score_cols is not None:
        return _n_classes(len(spec.score_cols)), None
    counts: dict[int, int] = {}
    for part in lengths():
        for n, k in (enumerate(part.tolist()) if isinstance(part, np.ndarray)
                     else part.items()):
            if k:
                counts[int(n)] = counts.get(int(n), 0) + int(k)
    if not counts:
        return 0, None
    length = min(counts, key=lambda n: (-counts[n], n))
    if length < 1:
        raise DataError(f"column '{spec.score_col}': no vectors to calibrate (need K >= 2 "
                        "entries)")
    return _n_classes(length), length


def read_scores(data: pd.DataFrame | pa.Table, score_col: str | None,
                 score_cols: Sequence[str] | None, problems: Problems,
                 finite: bool, length: int | None = None) -> np.ndarray:
    """The (n, K) score matrix; row problems recorded in ``problems``."""
    if score_cols is not None:
        if not score_cols:
            return np.empty((0, 0))
        n = len(data)
        out = np.empty((n, len(score_cols)))
        texts = []
        for j, c in enumerate(score_cols):
            out[:, j], text = column_to_float(data, c)
            texts.append(text)
        # Only rows whose sum is not finite can hold NaN or inf (text is NaN):
        # the per-column checks look at those rows only.
        with np.errstate(invalid="ignore"):
            odd = np.flatnonzero(~np.isfinite(np.einsum("ij->i", out)))
        for j, c in enumerate(score_cols):
            nan, inf = np.zeros(n, bool), np.zeros(n, bool)
            nan[odd] = np.isnan(out[odd, j])
            inf[odd] = np.isinf(out[odd, j])
            problems.add(c, "are text, not numbers", texts[j])
            problems.add(c, "are null or NaN", nan & ~texts[j])
            if finite:
                problems.add(c, "are infinite (this method needs finite scores)", inf)
        return out
    if score_col is None:
        raise ValueError("pass exactly one of score_col (a vector column) and score_cols "
                         "(one column per class)")
    m, null, bad_length = _vector_column(data, score_col, length)
    problems.add(score_col, "are null", null)
    problems.add(score_col, f"have a length other than {m.shape[1]} (ragged vectors)",
                 bad_length)
    ok = ~null & ~bad_length
    with np.errstate(invalid="ignore"):
        # Only rows whose sum is not finite can hold NaN or inf: look there
        # (einsum sums a short last axis fast; any(axis=1) over (n, K) does not).
        odd = np.flatnonzero(~np.isfinite(np.einsum("ij->i", m)))
        nan, inf = np.zeros(m.shape[0], bool), np.zeros(m.shape[0], bool)
        nan[odd] = np.isnan(m[odd]).any(axis=1)
        inf[odd] = np.isinf(m[odd]).any(axis=1)
        problems.add(score_col, "contain NaN or null", ok & nan)
        if finite:
            problems.add(score_col, "contain infinite values (this method needs finite scores)",
                         ok & inf)
    return m


def _n_classes(n_cols: int) -> int:
    return 2 if n_cols == 1 else n_cols


def _checked_scores(table: pd.DataFrame | pa.Table, score_col: str | None,
                    score_cols: Sequence[str] | None, problems: Problems, length: int | None,
                    finite: bool, probabilities: bool) -> np.ndarray:
    """:func:`read_scores`, and with ``probabilities`` each score in [0, 1]."""
    scores = read_scores(table, score_col, score_cols, problems, finite, length)
    if probabilities:
        with np.errstate(invalid="ignore"):
            outside = (scores < 0) | (scores > 1)
        if score_cols is not None:
            for j, c in enumerate(score_cols):
                problems.add(c, "are outside [0, 1]", outside[:, j])
        else:
            problems.add(str(score_col), "contain values outside [0, 1]",
                         np.asarray(outside.any(axis=1)))
    return scores


def check_score_args(score_col: str | None, score_cols: Any) -> list[str] | None:
    if (score_col is None) == (score_cols is None):
        raise ValueError("pass exactly one of score_col (a vector column) and score_cols "
                         "(one column per class)")
    if score_cols is not None:
        if isinstance(score_cols, str):
            raise TypeError("score_cols must be a list of column names")
        score_cols = [str(c) for c in score_cols]
        if len(score_cols) < 1:
            raise ValueError("score_cols must name at least one column")
        return list(score_cols)
    return None


# -- one reader for every engine: a batch of the user's columns to valid rows --------

@dataclass(frozen=True)
class RowPart:
    """The valid rows (weight > 0) of one part of the input, columns as numpy arrays.

    ``score``: (n,) for a binary score, or (n, K') per-class scores;
    ``label``: float64 (0/1 or a rate; the class index for multiclass);
    ``weight``: float64 or None (all 1); ``segments``: the rows' segment
    codes (-1: a null key) and the segment tuple of each code, or None;
    ``cut_from``: the rows of the part a segment's part was cut from (0: none,
    the part itself), which a sample per part takes its stride from.
    """

    score: np.ndarray
    label: np.ndarray
    weight: np.ndarray | None
    segments: tuple[np.ndarray, list[tuple[Any, ...]]] | None = None
    cut_from: int = 0

    @property
    def n_rows(self) -> int:
        return int(self.label.shape[0])

    @property
    def weight_total(self) -> float:
        """inf when the weights' sum overflows (the fit or evaluation then refuses it)."""
        if self.weight is None:
            return float(self.label.shape[0])
        with np.errstate(over="ignore"):
            return float(self.weight.sum())

    @property
    def binary(self) -> bool:
        return is_binary(self.label)

    def take(self, idx: np.ndarray) -> RowPart:
        """The rows at ``idx`` (no segments: a segment's own part)."""
        return RowPart(self.score[idx], self.label[idx],
                       None if self.weight is None else self.weight[idx],
                       cut_from=self.n_rows)

    def by_segment(self) -> list[tuple[Any, RowPart]]:
        """(segment tuple, its rows) for every segment with rows."""
        if self.segments is None:
            return []
        codes, keys = self.segments
        _, rows = group_by_code(codes, len(keys))
        return [(keys[c], self.take(idx)) for c, idx in enumerate(rows) if idx.shape[0]]


def group_by_code(codes: np.ndarray, n_keys: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The row indices of each segment code: (the rows coded -1, a null key;
    ``[rows coded c for c in range(n_keys)]``), each in the rows' order.

    ``codes``: each row's code, -1 to ``n_keys - 1`` (one stable sort, no
    pass per code).
    """
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(-1, n_keys + 1))
    return (order[bounds[0]:bounds[1]],
            [order[bounds[c + 1]:bounds[c + 2]] for c in range(n_keys)])


def check_columns(names: list[str], spec: Any) -> None:
    """The ``DataError`` of a column of ``spec`` (a KeySpec) missing from ``names``."""
    from ..errors import column_not_found
    from .validate import check_unique_columns

    check_unique_columns(names, spec.columns)
    for c in spec.columns:
        if c not in names:
            role = "segment" if c in spec.by else "label" if c == spec.label_col \
                else "weight" if c == spec.weight_col \
                else "prob" if spec.probabilities else "score"
            raise column_not_found(c, role, names)


def read_rows(table: pd.DataFrame | pa.Table, spec: Any, *, finite_scores: bool = False,
              n_classes: int | None = None) -> tuple[RowPart, dict[str, Any]]:
    """Check one batch of the user's columns and keep its valid rows with weight > 0.

    ``spec`` is a :class:`~distcal.core.keyed.KeySpec`. Binary scores
    follow the rules of :mod:`distcal.core.validate`; multiclass rows have
    K scores (:func:`read_scores`; probabilities to evaluate each in [0, 1]),
    a label that is a class index (:func:`~distcal.core.multiclass.label_problems`)
    and a weight (``n_classes``: the vectors' common length counted over the
    whole input, for vector columns: K, or 1 for the score of class 1 of a
    binary problem). Returns the rows and the batch's counts
    (:func:`add_up_rows` adds the batches' counts up and raises the input's
    :class:`~distcal.DataError`). Every check is counted, also at zero, in
    one fixed order (the message's).
    """
    check_columns(list(map(str, table.columns)) if isinstance(table, pd.DataFrame)
                  else table.schema.names, spec)
    n = len(table)
    lengths: dict[int, int] | None = None  # of the vectors read at score_index
    problems = Problems(n)
    if spec.multiclass:
        # Problems in message order: the scores, the label, the weight, then the
        # other predictions (``check_cols``: read, checked, not used).
        score = _checked_scores(table, spec.score_col, spec.score_cols, problems, n_classes,
                                finite_scores and not spec.probabilities, spec.probabilities)
        k = _n_classes(score.shape[1])
        if k < 2:
            raise DataError(f"column '{spec.score_col}': no vectors to calibrate (need K >= 2 "
                            "entries)")
        label, text = column_to_float(table, spec.label_col, "label")
        for problem, mask in label_problems(label, k, text):
            problems.add(spec.label_col, problem, mask)
        weight = None
        if spec.weight_col is not None:
            weight, wtext = column_to_float(table, spec.weight_col, "weight")
            problems.check(spec.weight_col, "weight", weight, wtext)
        for entry in spec.check_cols:
            _checked_scores(table, entry if isinstance(entry, str) else None,
                            None if isinstance(entry, str) else entry, problems, None,
                            False, True)
    else:
        # The rules of each column's role: a score, or a probability to evaluate;
        # a label, or a per-row loss (thresholds).
        roles = {"score": "prob" if spec.probabilities else "score",
                 "label": spec.target, "weight": "weight", "p0": "prob", "p1": "prob"}
        # Problems in message order: the score, the columns checked with it
        # (``check_cols``: read, checked, not used), an interval's ends (p0 <= p1
        # checked after p1), the label, the weight.
        classes = spec.target == "classes"  # labels of any type: the rows' segments
        cols = [("score", spec.score_col), *((None, c) for c in spec.check_cols),
                *zip(("p0", "p1"), spec.interval_cols or ()),
                ("label", None if classes else spec.label_col), ("weight", spec.weight_col)]
        values: dict[str, np.ndarray] = {"label": np.zeros(n)}
        for part, name in cols:
            if name is None:
                continue
            if part == "score" and spec.score_index is not None:
                v, counted = vector_element(table[name], spec.score_index, name, roles["score"])
                lengths = dict(counted)
                text = np.zeros(v.shape[0], dtype=bool)
            else:
                v, text = column_to_float(table, name, roles[part or "score"])
            if part is not None:
                values[part] = v
            problems.check(name, roles[part or "score"], v, text, finite_scores)
            if part == "label" and spec.zero_one_labels:
                with np.errstate(invalid="ignore"):
                    problems.add(name, f"are neither 0 nor 1 ({spec.zero_one_labels})",
                                 (v > 0.0) & (v < 1.0))
            if part == "p1":
                p0_name = spec.interval_cols[0]
                with np.errstate(invalid="ignore"):
                    problems.add(p0_name, f"are above column '{name}' (an interval needs "
                                 f"{p0_name} <= {name})", values["p0"] > v)
        score, label, weight = values["score"], values["label"], values.get("weight")
    keep = ~problems.bad
    if weight is not None:
        with np.errstate(invalid="ignore"):
            keep &= weight > 0
    segments = None
    key_vectors: dict[str, int] = {}
    by = (spec.label_col,) if spec.target == "classes" else spec.by
    if by:
        from .keyed import KeyVectorsError, factorize_keys

        try:
            codes, keys = factorize_keys([table[b] for b in by], by)
        except KeyVectorsError as e:  # no key: counted here, raised by add_up_rows
            key_vectors = {str(e.column): e.count}
            codes, keys = np.full(n, -1, dtype=np.int64), []
            keep[:] = False
        if spec.target == "classes":  # a class per row: a null label is a problem
            problems.add(spec.label_col, "are null", codes < 0)
            keep &= codes >= 0
        segments = (codes[keep], keys)
    rows = RowPart(score[keep], label[keep], None if weight is None else weight[keep], segments)
    stats = {"items": problems.items, "rows": n, "invalid": int(problems.bad.sum()),
             "n_rows": rows.n_rows, "weight_total": rows.weight_total}
    if spec.interval_cols is not None and not spec.multiclass:  # the valid rows' widths
        from .interval_widths import width_partials

        stats["widths"] = width_partials((values["p1"] - values["p0"])[keep], rows.weight)
    if lengths is not None:
        stats["vectors"] = (spec.score_col, "prob" if spec.probabilities else "score",
                            spec.score_index, lengths)
    if key_vectors:
        stats["key_vectors"] = key_vectors
    return rows, stats


def _no_stats() -> dict[str, Any]:
    """The counts of no batch, to which :func:`merge_stats` adds batches."""
    return {"items": [], "rows": 0, "invalid": 0, "n_rows": 0, "weight_total": 0.0}


def merge_stats(total: dict[str, Any] | None, part: dict[str, Any]) -> dict[str, Any]:
    """The counts of :func:`read_rows` of the batches in ``total`` (None: none yet) and of
    one more batch, ``part``: ``total`` updated (problems added up by column and problem,
    in the order first seen)."""
    if total is None:
        total = _no_stats()
    items = {(c, p): k for c, p, k in total["items"]}
    for c, p, k in part["items"]:
        items[(c, p)] = items.get((c, p), 0) + k
    total["items"] = [(c, p, k) for (c, p), k in items.items()]
    for name in ("rows", "invalid", "n_rows", "weight_total"):
        total[name] += part[name]
    if "widths" in part:
        from .interval_widths import merge_widths

        total["widths"] = merge_widths(total.get("widths"), part["widths"])
    for column, k in part.get("key_vectors", {}).items():
        counts = total.setdefault("key_vectors", {})
        counts[column] = counts.get(column, 0) + k
    if "vectors" in part:
        lengths = total.setdefault("vectors", (*part["vectors"][:3], {}))[3]
        for k, v in part["vectors"][3].items():
            lengths[k] = lengths.get(k, 0) + v
    return total


@dataclass(frozen=True)
class RowTotals:
    n_rows: int
    weight_total: float
    dropped_rows: int
    # The valid rows' interval widths (distcal.core.interval_widths), when the spec has
    # interval_cols.
    interval_widths: dict[str, Any] | None = None


def add_up_rows(stats: list[dict[str, Any]], on_invalid: str,
                weight_col: str | None = None) -> RowTotals:
    """The batches' counts of :func:`read_rows` added up; the input's ``DataError`` if any.

    Raised for any problem unless ``on_invalid="drop"``, and for an input
    with no row of weight > 0 left.
    """
    total = _no_stats()
    for st in stats:
        merge_stats(total, st)
    for column, k in total.get("key_vectors", {}).items():  # no keys: whatever on_invalid
        from .keyed import KeyVectorsError

        raise KeyVectorsError(column, k)
    if "vectors" in total:  # a problem of the column, raised whatever on_invalid says
        from .validate import check_vector_lengths

        check_vector_lengths(*total["vectors"])
    message = problems_message(total["items"])
    if message and on_invalid == "raise":
        raise DataError(message + " (pass on_invalid='drop' to drop such rows)")
    if total["n_rows"] == 0:
        zero = total["rows"] - total["invalid"]
        raise DataError(f"no rows with weight > 0 to use ({total['rows']} rows read, "
                        f"{total['invalid']} invalid" + (
                            f"; column '{weight_col}' (weight) is 0 in the other {zero})"
                            if weight_col is not None and zero else ")"))
    if not np.isfinite(total["weight_total"]):  # (the methods' own sums would overflow too)
        raise sums_overflow(column=weight_col, n_rows=total["n_rows"])
    return RowTotals(total["n_rows"], float(total["weight_total"]), total["invalid"],
                     total.get("widths"))
