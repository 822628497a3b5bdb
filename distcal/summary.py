"""Calibration history: summaries of rows, exact fits and evaluations from them.

A :class:`Summary` is what a fit's keyed pass pools (:mod:`distcal.core.keyed`),
written out instead of fitted: per key (all rows; each ``by`` segment) the
table of distinct scores with the sums of w, w y, w y^2 and w^2, the row
counts and the labels' sums (:mod:`distcal.core.summary`). Every method
that distcal fits from rows except temperature scaling is a function of
that table (isotonic regression pools equal scores first; Platt scaling,
histogram binning and MODL read sums per distinct score), and so are the
evaluation's metrics and the cost-optimal threshold. Pooling commutes, so
the summary of a union of row sets is the union of their summaries pooled
again (:func:`merge_summaries`), and::

    fit(merge_summaries([summarize(a), summarize(b)])) == fit(concat(a, b))

exactly: the engines open summaries as they open rows
(:class:`~distcal.core.summary.SummarySource`) and the same plans run on
the same pooled tables (docs/history.md).

``decimals=d`` rounds every score to d decimals (``numpy.round``) before
pooling: at most 10**d + 1 distinct values in [0, 1] per key, and then
everything is exact for the rounded scores.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .core.keyed import KeySpec, merge_keyed
from .core.summary import (
    FIELDS,
    SCORE_SAMPLE_KEY,
    SummarySource,
    arrow_from_keyed,
    by_name,
    check_written_order,
    global_totals,
    keyed_from_arrow,
    round_keyed,
    score_sample,
    stored_sample,
    summary_keyed,
)
from .defaults import DEFAULTS
from .engines import get_engine, resolve_engine
from .errors import DataError, ModelError, ParameterError, sums_overflow, unexpected_arguments
from .logs import log
from .model import (
    MAX_TABLE_BYTES,
    build_or_damaged,
    damaged,
    nearly_equal,
    read_checked_meta,
    read_table_bytes,
    read_table_file,
)
from .model_format import _json_checksum
from .params import check_int, check_on_invalid, check_roles
from .storage import (
    fetch_dir,
    filesystem_for,
    is_local_uri,
    local_path,
    publish_dir,
    refuse_overlap,
)

__all__ = ["Summary", "summarize", "merge_summaries", "load_summary", "summary_source",
           "not_a_summary", "SUMMARY_FORMAT"]

SUMMARY_FORMAT = "distcal-summary"
SUMMARY_VERSION = 1
SUMMARY_JSON = "summary.json"
TABLE_FILE = "table.parquet"
# decimals beyond this round nothing a float64 in [0, 1] holds
MAX_DECIMALS = 17
# The table's columns that are sums of floats (compared to rounding by ==).
_SUMS = ("weight", "positives", "wyy", "ww", "label_sum")


class Summary:
    """The exact mergeable statistics of a set of rows (module docstring).

    Attributes
    ----------
    columns : dict
        The ``score``, ``label`` and ``weight`` columns the rows were read from.
    by : list of str
        The segment columns (empty: none).
    period : str or None
        A free label (a date), kept as given; None after a merge.
    decimals : int or None
        The rounding of the scores (None: none).
    n_rows, weight_total, dropped_rows : int, float, int
        Rows used (weight > 0), their total weight, rows dropped as invalid.
    read_from : str or None
        The path the rows were read from (not saved): :meth:`save` refuses a path
        inside it, which a re-read of the input would take for rows.
    """

    def __init__(self, table: pa.Table, *, columns: dict[str, str | None], by: Sequence[str],
                 n_rows: int, weight_total: float, dropped_rows: int = 0,
                 period: str | None = None, decimals: int | None = None,
                 read_from: str | None = None):
        if int(n_rows) < 1 or table.num_rows == 0:  # as summarize refuses no rows
            raise DataError("a summary of no rows: summarize refuses an input with no row "
                            "of weight > 0, and no summary holds none")
        self._table = table
        self.read_from = read_from
        self.columns = dict(columns)
        self.by = list(by)
        self.n_rows, self.weight_total = int(n_rows), float(weight_total)
        self.dropped_rows = int(dropped_rows)
        self.period, self.decimals = period, decimals

    @property
    def score_col(self) -> str:
        return str(self.columns["score"])

    @property
    def label_col(self) -> str:
        return str(self.columns["label"])

    @property
    def weight_col(self) -> str | None:
        return self.columns["weight"]

    @property
    def table(self) -> pd.DataFrame:
        """One row per (key, distinct score): the ``by`` columns (null: the key of all
        rows), ``score``, ``weight``, ``positives`` (sum w y), ``wyy`` (sum w y^2),
        ``ww`` (sum w^2), ``count`` (rows), ``label_sum`` (sum y), ``nonbinary``."""
        # (a by column named like a sum keeps its stored name: no column twice)
        names = [self.by[int(c[3:])] if c.startswith("by_") and self.by[int(c[3:])]
                 not in FIELDS else c for c in self._table.column_names]
        # Integer keys beside the null of all rows' key stay integers (objects), not floats
        # (which would make 2^53 and 2^53 + 1 one key).
        frame: pd.DataFrame = self._table.rename_columns(names).to_pandas(
            integer_object_nulls=True)
        return frame

    @property
    def arrow(self) -> pa.Table:
        """The summary table as stored (key columns named ``by_0``, ``by_1``, ...)."""
        return self._table

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def __repr__(self) -> str:
        return (f"Summary(period={self.period!r}, n_rows={self.n_rows}, "
                f"distinct={len(self)}, by={self.by}, decimals={self.decimals})")

    def __eq__(self, other: object) -> bool:
        """Equal as models are (:meth:`CalibrationModel.__eq__`): keys, scores, counts and
        settings exactly; the sums (of weights, labels, squares) to 1e-9 relative, since
        other partitions and engines add the same numbers in another order."""
        if not isinstance(other, Summary):
            return NotImplemented
        mine, theirs = self._meta(with_period=True), other._meta(with_period=True)
        if not nearly_equal(mine.pop("weight_total"), theirs.pop("weight_total")) \
                or mine != theirs or not self._table.schema.equals(other._table.schema):
            return False
        a, b = self._table, other._table
        return all(nearly_equal(a.column(c).to_numpy(), b.column(c).to_numpy()) if c in _SUMS
                   else a.column(c).equals(b.column(c)) for c in a.schema.names)

    def __add__(self, other: Summary) -> Summary:
        return merge_summaries([self, other])

    def source(self) -> SummarySource:
        """This summary as a keyed input of the engines."""
        return _source([self], "summaries")

    # -- persistence ---------------------------------------------------------------

    def _meta(self, with_period: bool = True) -> dict[str, Any]:
        meta = {"format": SUMMARY_FORMAT, "format_version": SUMMARY_VERSION,
                "columns": self.columns, "by": self.by, "decimals": self.decimals,
                "n_rows": self.n_rows, "weight_total": self.weight_total,
                "dropped_rows": self.dropped_rows}
        if with_period:
            meta["period"] = self.period
        return meta

    def save(self, path: str | os.PathLike[str], overwrite: bool = False) -> None:
        """Write the summary directory: ``summary.json`` + ``table.parquet``.

        Written aside and committed into place (:mod:`distcal.storage`), so a
        reader sees the old or the new directory, never a mix; an existing
        one is replaced only with ``overwrite=True``. ``path``: a local
        path or any fsspec URL, not inside the input the rows were read from.
        """
        if self.read_from is not None:
            refuse_overlap(os.fspath(path), self.read_from)
        publish_dir(filesystem_for(os.fspath(path)), os.fspath(path), self.write_dir,
                    overwrite=overwrite, kind="summary")

    def write_dir(self, tmp: Path) -> None:
        """Write the summary's files into the new local directory ``tmp``."""
        from .version import __version__

        tmp.mkdir()
        sample = score_sample(self._table).astype("<f8").tobytes()
        pq.write_table(self._table.replace_schema_metadata({SCORE_SAMPLE_KEY: sample}),
                       tmp / TABLE_FILE)
        size = (tmp / TABLE_FILE).stat().st_size
        if size > MAX_TABLE_BYTES:  # what load_summary reads (untrusted input): not written
            raise DataError(f"this summary's table of {self._table.num_rows} (key, score) "
                            f"rows takes {size} bytes, more than distcal reads back "
                            f"({MAX_TABLE_BYTES}): summarize with decimals= (rounded "
                            "scores), fewer by columns or shorter periods")
        data = (tmp / TABLE_FILE).read_bytes()
        meta = self._meta()
        meta["library_version"] = __version__
        meta["tables"] = {"table": {"file": TABLE_FILE, "rows": self._table.num_rows,
                                    "sha256": hashlib.sha256(data).hexdigest()}}
        meta["checksum"] = _json_checksum(meta)
        with open(tmp / SUMMARY_JSON, "w") as fh:
            json.dump(meta, fh, indent=2, sort_keys=True, allow_nan=False)
            fh.write("\n")


# -- summarize ---------------------------------------------------------------------------

def _check_decimals(decimals: Any) -> int | None:
    if decimals is None:
        return None
    return check_int(decimals, 0, MAX_DECIMALS,
                     f"decimals must be None or an integer in [0, {MAX_DECIMALS}]")


def _check_period(period: Any) -> str | None:
    if period is None:
        return None
    if not isinstance(period, str) or len(period) > 200:
        raise ParameterError(f"period must be None or a string (at most 200 characters), "
                             f"got {str(period)[:80]!r}")
    return period


def summarize(data: Any, score_col: str = DEFAULTS.score_col,
              label_col: str = DEFAULTS.label_col, weight_col: str | None = DEFAULTS.weight_col,
              by: str | list[str] | None = None, engine: str = DEFAULTS.engine,
              period: str | None = None, decimals: int | None = None, *,
              on_invalid: str = DEFAULTS.on_invalid, **engine_opts: Any) -> Summary:
    """The exact mergeable statistics of the rows: the map side of a fit, without the fit.

    One keyed pass over the rows (the pass :func:`distcal.fit` makes, with
    the same checks and messages): per key (all rows, and each segment of
    ``by``) the distinct scores with their sums of w, w y, w y^2 and w^2,
    row counts and label sums. Nothing else is kept, so a summary is as
    large as the distinct (key, score) pairs, not the rows.

    Parameters
    ----------
    data, score_col, label_col, weight_col, engine, on_invalid, **engine_opts
        As for :func:`distcal.fit` (one score per row).
    by : str or list of str, optional
        Also summarise each segment (distinct value or tuple of these columns).
    period : str, optional
        A free label (e.g. the date "2026-12-03"), kept with the summary.
    decimals : int, optional
        Round every score to this many decimals (``numpy.round``) first:
        at most 10**decimals + 1 distinct values in [0, 1] per key; every
        result from the summary is then exact for the rounded scores.

    Returns
    -------
    Summary
        ``fit``, ``evaluate`` (the scores as probabilities) and
        ``optimal_threshold`` accept it (or its saved directory, or a list
        of them) and give what they give on the rows.

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> df = pd.DataFrame({"score": [.1, .3, .3, .7], "label": [0, 1, 0, 1]})
    >>> s = distcal.summarize(df, period="2026-12-03")
    >>> s.table[["score", "weight", "positives", "count"]].values.tolist()
    [[0.1, 1.0, 0.0, 1.0], [0.3, 2.0, 1.0, 2.0], [0.7, 1.0, 1.0, 1.0]]
    >>> distcal.fit(s).predict([0.3]) == distcal.fit(df).predict([0.3])
    array([ True])
    """
    from .keyed_fit import check_by

    check_on_invalid(on_invalid)
    check_roles(score_col=score_col, label_col=label_col, weight_col=weight_col)
    d = _check_decimals(decimals)
    period = _check_period(period)
    columns = {"score": score_col, "label": label_col, "weight": weight_col}
    names = check_by(by, columns, 0.0) if by is not None else []
    name = resolve_engine(data, engine)
    impl = get_engine(name)
    unknown = set(engine_opts) - set(impl.options)
    if unknown:
        raise unexpected_arguments("summarize", unknown)
    if impl.is_vector_column(data, score_col):
        raise DataError(f"column '{score_col}' (score) holds vectors; a summary takes one "
                        "score per row (summarize each class's score column)")
    spec = KeySpec(score_col=score_col, label_col=label_col, weight_col=weight_col,
                   by=tuple(names), squares=True)
    with impl.open_keyed(data, spec, on_invalid=on_invalid, passes=1,
                         **engine_opts) as ranges:
        parts = ranges.map(functools.partial(round_keyed, decimals=d))  # on the workers
        n_rows, weight_total, dropped = ranges.n_rows, ranges.weight_total, ranges.dropped_rows
    # Rounded scores equal across two ranges pool here (pooling again is exact).
    kt = merge_keyed(parts)
    if not math.isfinite(weight_total) or not np.all(np.isfinite(kt.table.weight)):
        raise sums_overflow()
    _check_squares(kt, weight_col)
    log.info("summarize: %d rows (%d dropped) to %d (key, score) rows%s", n_rows, dropped,
             len(kt.table), f", period {period}" if period else "")
    try:
        table = arrow_from_keyed(kt, len(names))
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # a by column of values of several types
        raise _mixed_key_types(kt, names) from None
    return Summary(table, columns=columns, by=names, n_rows=n_rows, weight_total=weight_total,
                   dropped_rows=dropped, period=period, decimals=d,
                   read_from=os.fspath(data) if isinstance(data, (str, os.PathLike)) else None)


def _check_squares(kt: Any, weight_col: str | None) -> None:
    """A summary keeps each (key, score)'s sum of squared weights (the variance terms of
    evaluation's intervals and tests): a DataError, naming the rows, where they overflow
    or underflow to 0 in float64 (weights beyond about 1e154 or below about 1e-162),
    which a saved summary could not be read back with."""
    if kt.ww is None or weight_col is None:
        return
    for bad, what, fix in ((~np.isfinite(kt.ww), "overflow float64 (above about 1e154)",
                            "divide"),
                           (kt.ww <= 0.0, "underflow to 0 in float64 (below about 1e-162)",
                            "multiply")):
        if bad.any():
            rows = _rows_at(kt, bad)
            have = "rows have" if rows != 1 else "row has"
            raise DataError(f"column '{weight_col}' (weight): {rows} {have} weights whose "
                            f"squares, summed per score, {what}; a summary keeps sums of "
                            f"squared weights: {fix} the weights by a constant")


def _rows_at(kt: Any, bad: np.ndarray) -> int:
    """The rows in the (key, score)s ``bad`` marks: those of the segments' if any is marked
    (each row is in one segment, and a (score)'s sum of all rows is marked only where its
    segments' are), else of the key of all rows."""
    key = np.repeat(np.arange(len(kt.keys)), np.diff(kt.starts))
    g = kt.global_index()
    segment = np.ones(key.shape[0], dtype=bool) if g is None else key != g
    where = bad & segment if (bad & segment).any() else bad
    return int(kt.table.count[where].sum())


def _mixed_key_types(kt: Any, names: list[str]) -> DataError:
    """The DataError of a ``by`` column whose segments' values are of several types
    (one Arrow column holds one type), with the rows of each type."""
    rows, _ = kt.key_totals()
    for j, name in enumerate(names):
        per_type: dict[str, int] = {}
        for (seg, _), n in zip(kt.keys, rows.tolist()):
            if isinstance(seg, tuple) and seg[j] is not None:
                kind = type(seg[j]).__name__
                per_type[kind] = per_type.get(kind, 0) + int(n)
        if len(per_type) > 1:
            counts = ", ".join(f"{n} row{'' if n == 1 else 's'} of {kind}"
                               for kind, n in sorted(per_type.items()))
            return DataError(f"column '{name}' (segment) holds values of several types "
                             f"({counts}); a summary stores one type per column: cast the "
                             "column to one type")
    return DataError(f"the by columns {names} hold values Arrow cannot store in one column")


# -- merge ---------------------------------------------------------------------------------

def _same_rows(first: dict[str, Any], other: dict[str, Any], what: str) -> None:
    """DataError unless ``other`` summarises rows of the same columns as ``first`` (two
    summaries' metadata: :meth:`Summary._meta` or a saved summary.json)."""
    for attr in ("columns", "by", "decimals"):
        a, b = first[attr], other[attr]
        if a != b:
            raise DataError(f"{what}: the summaries differ in {attr} ({a!r} and {b!r}); "
                            "only summaries of the same columns (and decimals) merge")


def merge_summaries(summaries: Sequence[Summary]) -> Summary:
    """The summary of the union of the summaries' rows (their period: None).

    The tables are concatenated and pooled again by (key, score), which is
    exact (pooling commutes), so the merge is associative and commutative.
    Summaries of other score, label, weight or ``by`` columns, or of other
    ``decimals``, are a :class:`~distcal.DataError`.

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> a = distcal.summarize(pd.DataFrame({"score": [.1, .3], "label": [0, 1]}))
    >>> b = distcal.summarize(pd.DataFrame({"score": [.3, .9], "label": [0, 1]}))
    >>> (a + b).n_rows, len(a + b)
    (4, 3)
    """
    items = list(summaries)
    if not items or not all(isinstance(s, Summary) for s in items):
        raise TypeError("merge_summaries takes a non-empty list of distcal.Summary")
    src = _source(items, "merge_summaries")
    n_by = len(src.by)
    tables = list(src.tables)
    for j, name in enumerate(src.by):  # e.g. int64 in one summary, string in another
        types = sorted({str(t.schema.field(by_name(j)).type) for t in tables})
        if len(types) > 1:
            try:  # (int64 keys beyond 2^53 do not become doubles either)
                pa.concat_tables([t.select([by_name(j)]) for t in tables],
                                 promote_options="permissive")
            except (pa.ArrowTypeError, pa.ArrowInvalid):
                raise DataError(f"merge_summaries: column '{name}' (segment) has type "
                                f"{' in some summaries and '.join(types)} in others; only "
                                "summaries whose by columns have one type merge") from None
    kt = keyed_from_arrow(pa.concat_tables(tables, promote_options="permissive"), n_by)
    if not np.all(np.isfinite(kt.table.weight)):  # as summarize refuses such rows
        raise sums_overflow()
    _check_squares(kt, src.columns["weight"])
    return Summary(arrow_from_keyed(kt, n_by), columns=src.columns, by=src.by,
                   n_rows=src.n_rows, weight_total=src.weight_total,
                   dropped_rows=src.dropped_rows, period=None, decimals=items[0].decimals)


# -- load ------------------------------------------------------------------------------------

def _read_meta(root: Path) -> dict[str, Any]:
    """summary.json of ``root``, checked (format, version, checksum, fields), or ModelError."""
    meta = read_checked_meta(root, SUMMARY_FORMAT, SUMMARY_VERSION, name=SUMMARY_JSON,
                             noun="summary", version_text=lambda v: str(v)[:40])

    def check() -> None:
        cols, by = meta["columns"], meta["by"]
        if not (isinstance(cols, dict) and set(cols) == {"score", "label", "weight"}
                and all(isinstance(cols[k], str) and cols[k] for k in ("score", "label"))
                and (cols["weight"] is None or isinstance(cols["weight"], str))):
            raise ValueError("columns must name the score, label and weight columns")
        if not (isinstance(by, list) and all(isinstance(b, str) and b for b in by)
                and len(set(by)) == len(by) and len(by) <= 64):
            raise ValueError("by must be a list of distinct column names")
        for k in ("n_rows", "dropped_rows"):
            if type(meta[k]) is not int or meta[k] < 0:
                raise ValueError(f"{k} must be a count")
        if meta["n_rows"] == 0:  # summarize refuses an input of no rows
            raise ValueError("a summary of no rows")
        w = meta["weight_total"]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 0:
            raise ValueError("weight_total must be a number >= 0")
        _check_decimals(meta["decimals"])
        if meta["period"] is not None and not isinstance(meta["period"], str):
            raise ValueError("period must be a string or null")

    build_or_damaged(root, check)
    return meta


def _table_of(root: Path, meta: dict[str, Any]) -> pa.Table:
    """The checked summary table of ``root`` (every sum consistent, totals equal meta's)."""

    def read() -> pa.Table:
        tables = meta["tables"]
        if not isinstance(tables, dict) or set(tables) != {"table"}:
            raise damaged(root, f"unexpected tables in {SUMMARY_JSON}")
        table = read_table_file(root, tables["table"], TABLE_FILE)
        _check_schema(table.schema, len(meta["by"]), root)
        sample = (table.schema.metadata or {}).get(SCORE_SAMPLE_KEY)
        if sample is not None:  # what a refit on a cluster reads (the bounds of its ranges)
            stored_sample(sample, table.num_rows, str(root / TABLE_FILE))
        _check_order(root, [table], len(meta["by"]))
        kt = summary_keyed(table, len(meta["by"]))
        if meta["columns"]["weight"] is None:  # rows of weight 1: sums of w are counts
            count = table.column("count").to_numpy().astype(np.float64)
            if not all(np.array_equal(table.column(a).to_numpy(), b) for a, b in (
                    ("weight", count), ("ww", count),
                    ("positives", table.column("label_sum").to_numpy()))):
                raise damaged(root / TABLE_FILE, "its rows have no weights, but the sums of "
                              "their weights are not their counts")
        n, w = global_totals(kt)
        if n != meta["n_rows"] or not math.isclose(w, meta["weight_total"], rel_tol=1e-9,
                                                   abs_tol=1e-12):
            raise damaged(root, f"the table's rows or weight differ from {SUMMARY_JSON}")
        return table

    return build_or_damaged(root, read)


def _check_schema(schema: pa.Schema, n_by: int, root: Path) -> None:
    """The columns of a summary table and the types of its sums (its nulls are checked as
    it is read: :func:`~distcal.core.summary.summary_keyed`)."""
    names = [by_name(j) for j in range(n_by)] + list(FIELDS)
    if schema.names != names:
        raise ModelError(f"'{root / TABLE_FILE}' does not hold the expected columns "
                         f"({schema.names[:20]})")
    for f in FIELDS:
        t = schema.field(f).type
        ok = (pa.types.is_int64(t) if f == "count" else pa.types.is_boolean(t)
              if f == "nonbinary" else pa.types.is_float64(t))
        if not ok:
            raise damaged(root / TABLE_FILE, f"column {f!r} has type {t}")


def _check_order(root: Path, batches: Any, n_by: int) -> None:
    try:
        check_written_order(batches, n_by)
    except ValueError as exc:
        raise damaged(root / TABLE_FILE, str(exc)) from None


def _load_dir(root: Path) -> Summary:
    meta = _read_meta(root)
    table = _table_of(root, meta)
    return Summary(table, columns=meta["columns"], by=meta["by"], n_rows=meta["n_rows"],
                   weight_total=float(meta["weight_total"]), dropped_rows=meta["dropped_rows"],
                   period=meta["period"], decimals=meta["decimals"])


def load_summary(path: str | os.PathLike[str]) -> Summary:
    """Read the summary directory ``path`` (local path or URL) written by :meth:`Summary.save`.

    The directory is untrusted input, read as model directories are: only
    the regular files ``summary.json`` and ``table.parquet`` directly
    inside it (no symbolic link), the checksums of both, and every sum of
    the table checked for consistency (weights > 0, positives within
    [0, weight], no (key, score) pair twice, totals equal to the metadata).

    Raises
    ------
    ModelError
        Missing, not a summary, of another format version, or damaged.
    """
    uri = os.fspath(path)
    return load_summary_on(filesystem_for(uri), uri)


def load_summary_on(fs: Any, uri: str) -> Summary:
    """:func:`load_summary` of ``uri`` on the store ``fs`` (a command-line backend's own)."""
    if not fs.local and not fs.exists(uri):
        raise ModelError(f"summary directory '{uri}' does not exist")
    return fetch_dir(fs, uri, _load_dir)


# -- summaries as the input of fit, evaluate and optimal_threshold --------------------------

def is_summary_dir(data: Any) -> bool:
    """Whether ``data`` is the path of a summary directory (one holding summary.json): a
    local path, or a URL on any store :func:`~distcal.storage.filesystem_for` reaches."""
    if not isinstance(data, (str, os.PathLike)):
        return False
    uri = os.fspath(data)
    if is_local_uri(uri):
        return os.path.lexists(os.path.join(local_path(uri), SUMMARY_JSON))
    try:
        return bool(filesystem_for(uri).exists(uri.rstrip("/") + "/" + SUMMARY_JSON))
    except (ImportError, OSError, ValueError):
        # a store fsspec cannot open here (e.g. s3a://, which only Spark's Hadoop reads):
        # not a summary this process can read; the engine reads it as rows
        return False


def summary_source(data: Any) -> SummarySource | None:
    """``data`` as summaries to read (a Summary, a saved summary's path, or a non-empty list
    of them), else None (rows).

    Saved summaries are checked here (metadata, checksums) and their tables
    read by the engine: locally streamed in batches; on a cluster by its
    workers (a summary can have millions of rows).
    """
    if isinstance(data, Summary):
        return data.source()
    if is_summary_dir(data):
        items: list[Any] = [data]
    elif (isinstance(data, (list, tuple)) and data
          and any(isinstance(d, Summary) or is_summary_dir(d) for d in data)):
        items = list(data)  # every item must then be a summary (ModelError otherwise)
    else:
        return None
    return _source(items, "summaries")


def not_a_summary(what: str, item: Any) -> ParameterError:
    """The error of an item of a list of summaries that is neither a summary nor a path."""
    return ParameterError(f"{what}: every item must be a Summary or the path of a saved "
                          f"summary, got {type(item).__name__}")


def _source(items: list[Any], what: str) -> SummarySource:
    """Summaries and saved summaries' paths as one keyed input: of the same columns (else
    a DataError naming ``what``), with the totals of all of them."""
    tables: list[pa.Table] = []
    files: list[str] = []
    metas: list[dict[str, Any]] = []  # what _same_rows compares and the totals add up
    for item in items:
        if not isinstance(item, (Summary, str, os.PathLike)):
            raise not_a_summary(what, item)
        if isinstance(item, (str, os.PathLike)) and not is_local_uri(os.fspath(item)):
            # On another store: copied here and checked, as distcal.load reads a model there.
            item = load_summary(item)
        if isinstance(item, Summary):
            tables.append(item.arrow)
            metas.append(item._meta())
        else:
            root = Path(local_path(os.fspath(item)))
            meta = _read_meta(root)
            _check_file(root, meta)
            files.append(str(root / TABLE_FILE))
            metas.append(meta)
    first = metas[0]
    for m in metas[1:]:
        _same_rows(first, m, what)
    return SummarySource(dict(first["columns"]), tuple(first["by"]), tuple(tables),
                         tuple(files), sum(m["n_rows"] for m in metas),
                         math.fsum(m["weight_total"] for m in metas),
                         sum(m["dropped_rows"] for m in metas))


def _check_file(root: Path, meta: dict[str, Any]) -> None:
    """The table file of a saved summary read by an engine: the one its summary.json names
    (sha256), with a summary table's columns and types, and its rows in the order
    :meth:`Summary.save` writes them (read a batch at a time; the engine checks the sums
    and nulls of every piece it reads, and the totals)."""
    info = meta.get("tables")
    entry = info.get("table") if isinstance(info, dict) else None
    if not isinstance(entry, dict) or entry.get("file") != TABLE_FILE:
        raise damaged(root, f"{SUMMARY_JSON} names no '{TABLE_FILE}'")
    data = read_table_bytes(root, entry, TABLE_FILE)
    n_by = len(meta["by"])

    def check() -> None:
        file = pq.ParquetFile(pa.BufferReader(data))
        _check_schema(file.schema_arrow, n_by, root)
        _check_order(root, file.iter_batches(
            batch_size=1 << 16, columns=[by_name(j) for j in range(n_by)] + ["score"]), n_by)

    build_or_damaged(root / TABLE_FILE, check)

