"""A calibration model as one SQL expression (``model.to_sql``).

The expression computes ``model.predict`` from a score expression, in
Spark SQL, DuckDB, PostgreSQL, BigQuery or Snowflake:

* blocks and bins (isotonic, histogram, MODL): the search of
  :mod:`distcal.core.piecewise` written as nested ``CASE WHEN s >= t THEN
  ... ELSE ... END``, a binary search of depth ceil(log2(leaves)), so 100,000
  blocks cost about 18 comparisons per row, not a 100,000-arm CASE. Runs of
  equal constant leaves collapse into one. Spark and DuckDB run the same
  search as a loop over an array of thresholds instead (see _ARRAY_SEARCH). Linear leaves are
  ``slope * (s - x) + y`` with slope, x and y computed by numpy as
  ``np.interp`` computes them: the same double operations, the same result.
* sigmoid: ``1 / (1 + EXP(a * s + b))``; where ``|a s + b| > 708`` the
  value is 0 or 1 (the exact value is below 3.3e-308 from it), which keeps
  PostgreSQL's EXP from raising its overflow and underflow errors.
* beta: ``1 / (1 + EXP(-z))``, z = a LN(x) - b LN(1 - x) + c with x the
  score clipped to [1e-12, 1 - 1e-12] by ``CASE`` (a NaN score is caught
  first); 0 or 1 where ``|z| > 708``, as for sigmoid.
* segments (``by``): ``CASE WHEN key = v THEN <map of v> ... ELSE <global>
  END``; segments that fell back, unseen keys and null keys take the global
  map, as ``predict`` does.
* one-vs-rest (K classes, ``score=[e_0, ..., e_{K-1}]``): K expressions,
  p_k = q_k / (q_0 + ... + q_{K-1}), 1/K where the sum is 0 (K = 2: p1 =
  q_1(e_1), p0 = 1 - p1), as scikit-learn's ``CalibratedClassifierCV``.
* temperature: p_k = exp(beta z_k - m) / sum_j exp(beta z_j - m), m the
  largest beta z_j, z = the scores (logits) or ln(s + 1e-12) when the fit
  read probabilities; where some z_j are +inf, those classes share 1.

Float literals are the shortest repr of each double written with an
exponent (``0.1e0``): every dialect reads such a literal as a double, or,
PostgreSQL, as an exact numeric that it converts to the same double; so
every constant round-trips exactly. Each map is cast to the dialect's double
type. NULL in gives NULL out; NaN gives NaN.

sqlglot parses the caller's score and key expressions and writes the
dialect-specific pieces (casts, infinities, the NaN test, identifiers,
string literals); the search itself is spelled the same in every dialect
and is assembled as text, which keeps a 100,000-block export to a fraction
of a second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.piecewise import Piecewise, is_keyed, piecewise

__all__ = ["DIALECTS", "to_sql", "ovr_normalise_sql", "quoted_column"]

DIALECTS = ("spark", "duckdb", "postgres", "bigquery", "snowflake")
# NaN = NaN is true in these two and they have no ISNAN function.
_NAN_BY_EQUALITY = {"postgres": True, "snowflake": True}
# PostgreSQL raises "value out of range: underflow" when a product of two non-zero
# doubles rounds to 0 (e.g. a slope times the distance 5e-324 from a knot at 0): there,
# c * x is written as 0 when |c x| < 1e-300, a difference below 1e-300 from predict.
_UNDERFLOW_RAISES = {"postgres": True}
TINY = 1e-300
# Nested CASE costs these engines more than the search itself: Spark's analyser
# computes the type of a nested CASE (or IF) from both branches, again at every level
# (work growing as 4^depth: seconds at depth 8, out of memory at 14), and DuckDB plans a
# 100,000-block tree in about 40 s. There the search is a loop over the halving steps
# reading the thresholds from one array, itself a single string literal split and cast
# (the parser sees one token, not 200,000 numbers; the cast reads each repr exactly).
# Per dialect: the array of a string, the index of the first element, the loop.
# DuckDB's cost per row grows with the size of the arrays a lambda captures (1e6
# rows: 0.2 s with 1,000 blocks, 22 s with one loop over 100,000), so its search is a
# nested CASE down to slices of at most 4,096 leaves, each a loop over its own arrays
# (8 s; slices of 256: 18 s, of 64: 38 s, 4,096 to 32,768 alike). Spark keeps one
# loop (no CASE at all: its analyser is what nested CASE costs there).
_ARRAY_SLICE = {"spark": 0, "duckdb": 4096}
_ARRAY_SEARCH: dict[str, tuple[str, int, str]] = {
    "spark": ("CAST(split('{values}', ',') AS ARRAY<{type}>)", 0,
              "aggregate(array({steps}), 0, ({i}, {d}) -> IF({t}[{i} + {d} - 1] {op} {s}, "
              "{i} + {d}, {i}), {i} -> {leaf})"),
    "duckdb": ("CAST(string_split('{values}', ',') AS {type}[])", 1,
               "list_transform([list_reduce([{steps}], lambda {i}, {d}: CASE WHEN "
               "{t}[{i} + {d}] {op} {s} THEN {i} + {d} ELSE {i} END, 0)], "
               "lambda {i}: {leaf})[1]"),
}
_I, _D = "__distcal_i", "__distcal_d"  # lambda variables: never a user column
EXP_LIMIT = 708.0  # exp(+-708) is a normal double; PostgreSQL raises on overflow/underflow
LOGIT_EPS = 1e-12  # scikit-learn's log(p + 1e-12) for probabilities (distcal.core.multiclass)


def _check_dialect(dialect: str) -> str:
    if dialect not in DIALECTS:
        raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, got {dialect!r}")
    return dialect


def quoted_column(name: str, dialect: str) -> str:
    """The column ``name`` as the data names it, as SQL of ``dialect``: always quoted, as
    a bare name can be a keyword (``order``), a function (PostgreSQL's ``user``), folded
    (PostgreSQL lowers ``Seg``, Snowflake uppers ``seg``) or a query, and no dialect's
    list of reserved words is complete; quotes inside the name are escaped (sqlglot)."""
    from sqlglot import exp

    return str(exp.column(exp.to_identifier(name, quoted=True)).sql(
        dialect=_check_dialect(dialect)))


class _Writer:
    """The dialect-specific pieces of one export, written by sqlglot once each."""

    def __init__(self, dialect: str):
        from sqlglot import exp

        self.dialect = _check_dialect(dialect)
        self._exp = exp
        self.double_type = exp.DataType.build("double").sql(dialect=dialect)
        self.inf = self._cast_text("inf")
        self.neg_inf = self._cast_text("-inf")
        self.nan = self._cast_text("NaN")

    def _cast_text(self, text: str) -> str:
        exp = self._exp
        return str(exp.cast(exp.Literal.string(text), "double").sql(dialect=self.dialect))

    def num(self, x: float) -> str:
        """A double literal that reads back as exactly ``x``."""
        x = float(x)
        if math.isnan(x):
            return self.nan
        if math.isinf(x):
            return self.inf if x > 0 else self.neg_inf
        text = repr(x)
        if "e" not in text and "inf" not in text:
            text += "e0"
        return f"({text})" if text.startswith("-") else text

    def expression(self, sql: str, what: str) -> str:
        """The caller's SQL expression, parsed in the dialect; parenthesised unless atomic."""
        import sqlglot
        from sqlglot.errors import ParseError, TokenError

        if not isinstance(sql, str) or not sql.strip():
            raise ValueError(f"{what} must be a non-empty SQL expression, got {sql!r}")
        try:
            tree = sqlglot.parse_one(sql, read=self.dialect)
        except (ParseError, TokenError) as exc:  # TokenError: an unclosed quote
            raise ValueError(f"{what} {sql!r} is not a {self.dialect} SQL expression: "
                             f"{str(exc).splitlines()[0]}") from exc
        if not isinstance(tree, (self._exp.Condition, self._exp.Subquery)):
            # "x AS y", "my score" (an alias), "select", "DROP TABLE t": not one value
            raise ValueError(f"{what} {sql!r} is not a {self.dialect} SQL expression of one "
                             f"value (it reads as {tree.sql(dialect=self.dialect)!r}); quote a "
                             "column name that is not a plain identifier")
        if tree.find(self._exp.Subquery, self._exp.Select) is not None:
            # Spark and DuckDB refuse a subquery inside the search's lambda; elsewhere it
            # would run once per step of the search.
            raise ValueError(f"{what} {sql!r} holds a subquery: compute it in an inner "
                             "query (or a join) and pass its column")
        text = str(tree.sql(dialect=self.dialect))
        atomic = isinstance(tree, (self._exp.Column, self._exp.Literal, self._exp.Identifier,
                                   self._exp.Paren))
        return text if atomic else f"({text})"

    def column(self, name: str) -> str:
        return quoted_column(name, self.dialect)

    def is_nan(self, s: str) -> str:
        if _NAN_BY_EQUALITY.get(self.dialect, False):
            return f"{s} = {self.nan}"
        exp = self._exp
        return str(exp.IsNan(this=exp.column("__s__")).sql(dialect=self.dialect)).replace(
            "__s__", s)

    def literal(self, v: Any) -> str:
        """A segment key value as a literal."""
        exp = self._exp
        if isinstance(v, (bool, np.bool_)):
            return "TRUE" if v else "FALSE"
        if isinstance(v, (int, np.integer)):
            return str(int(v)) if v >= 0 else f"({int(v)})"
        if isinstance(v, (float, np.floating)):
            return self.num(float(v))
        if isinstance(v, (bytes, bytearray)):  # str() would be the text "b'...'"
            raise ValueError(f"a segment key of bytes ({v[:20]!r}) has no SQL literal of "
                             "the same value in every dialect: export segment(key) or "
                             "global_model, or fit with text keys")
        return str(exp.Literal.string(str(v)).sql(dialect=self.dialect))

    def times(self, c: float, x: str) -> str:
        """``c * x`` for the constant c (see _UNDERFLOW_RAISES)."""
        c = float(c)
        if not _UNDERFLOW_RAISES.get(self.dialect, False) or c == 0.0 or not math.isfinite(c):
            return f"{self.num(c)} * {x}"
        with np.errstate(over="ignore"):
            limit = float(np.float64(TINY) / abs(c))
        return f"CASE WHEN ABS({x}) < {self.num(limit)} THEN 0.0e0 ELSE {self.num(c)} * {x} END"

    def double(self, sql: str) -> str:
        return f"CAST({sql} AS {self.double_type})"


# -- one binary map -------------------------------------------------------------------

def _leaf(pw: Piecewise, i: int, s: str, w: _Writer) -> str:
    if pw.constant[i]:
        return w.num(pw.y0[i])
    return f"{w.times(pw.slope[i], f'({s} - {w.num(pw.x0[i])})')} + {w.num(pw.y0[i])}"


def _slice(pw: Piecewise, lo: int, hi: int) -> Piecewise:
    """Leaves lo..hi and the thresholds between them."""
    return Piecewise(pw.thresholds[lo:hi], pw.right, pw.constant[lo:hi + 1],
                     pw.slope[lo:hi + 1], pw.x0[lo:hi + 1], pw.y0[lo:hi + 1])


def _search(pw: Piecewise, s: str, w: _Writer, slice_leaves: int = 0) -> str:
    """The nested CASE over the thresholds: depth ceil(log2(leaves)).

    With ``slice_leaves``, a range of at most that many leaves is searched by
    :func:`_array_search` instead of further CASEs.
    """
    n = pw.n_leaves
    # Run ids: leaves lo..hi are one constant when their ids are equal.
    same = np.zeros(n, dtype=bool)
    if n > 1:
        same[1:] = pw.constant[1:] & pw.constant[:-1] & (pw.y0[1:] == pw.y0[:-1])
    run = np.cumsum(~same)
    op = ">=" if pw.right else ">"
    leaves = [_leaf(pw, i, s, w) for i in range(n)] if not slice_leaves else \
        [_leaf(pw, i, s, w) if pw.constant[i] else "" for i in range(n)]
    thresholds = [w.num(t) for t in pw.thresholds]
    out: list[str] = []

    def node(lo: int, hi: int) -> None:  # recursion depth log2(n)
        if run[lo] == run[hi]:
            out.append(leaves[lo])
            return
        if hi - lo < slice_leaves:
            out.append(_array_search(_slice(pw, lo, hi), s, w))
            return
        mid = (lo + hi + 1) // 2  # leaf index >= mid  <=>  t[mid - 1] (op) s
        out.append(f"CASE WHEN {s} {op} {thresholds[mid - 1]} THEN ")
        node(mid, hi)
        out.append(" ELSE ")
        node(lo, mid - 1)
        out.append(" END")

    node(0, n - 1)
    return "".join(out)


def _array_search(pw: Piecewise, s: str, w: _Writer) -> str:
    """The branchless binary search of :mod:`distcal.export.onnx_graph`, as SQL.

    i = 0, then for d = 2^(r-1), ..., 2, 1: i += d where T[i + d - 1] <= s (0-based),
    T the thresholds padded with NaN to 2^r - 1 entries (NaN <= s and NaN < s are
    false for every number s; NaN scores never get here), r = bit_length(m); then
    leaf i. ``aggregate`` (Spark) or ``list_reduce`` (DuckDB) runs the loop.
    """
    array_of, base, loop = _ARRAY_SEARCH[w.dialect]

    def array(values: Any, kind: str = "DOUBLE") -> str:
        return array_of.format(values=",".join(values), type=kind)

    def number(x: float) -> str:
        return "NaN" if math.isnan(x) else repr(float(x))

    def at(arr: str) -> str:
        return f"{arr}[{_I}{' + 1' if base else ''}]"

    m = pw.thresholds.shape[0]
    rounds = m.bit_length()
    if rounds == 0:  # no threshold: one leaf, a constant
        return w.num(pw.y0[0])
    y = at(array(number(v) for v in pw.y0))
    if pw.constant.all():
        leaf = y
    else:
        leaf = (f"CASE WHEN {at(array(('true' if c else 'false' for c in pw.constant), 'BOOLEAN'))}"
                f" THEN {y} ELSE {at(array(number(v) for v in pw.slope))} * ({s} - "
                f"{at(array(number(v) for v in pw.x0))}) + {y} END")
    padded = np.full((1 << rounds) - 1, np.nan)
    padded[:m] = pw.thresholds
    return loop.format(steps=", ".join(str(1 << r) for r in reversed(range(rounds))),
                       i=_I, d=_D, t=array(number(t) for t in padded),
                       op="<=" if pw.right else "<", s=s, leaf=leaf)


def _sigmoid(model: Any, s: str, w: _Writer) -> str:
    a, b = float(model.params["a"]), float(model.params["b"])
    # a = 0: the constant map, at s = +-inf too (0 * inf is NaN)
    a_s = w.times(a, s) if a != 0.0 else f"CASE WHEN {w.is_nan(s)} THEN {w.nan} ELSE 0.0e0 END"
    z = f"({a_s} + {w.num(b)})"
    return (f"CASE WHEN {s} IS NULL THEN NULL WHEN {w.is_nan(z)} THEN {w.nan} "
            f"WHEN {z} > {w.num(EXP_LIMIT)} THEN 0.0e0 WHEN {z} < {w.num(-EXP_LIMIT)} THEN 1.0e0 "
            f"ELSE 1.0e0 / (1.0e0 + EXP({z})) END")


def _beta(model: Any, s: str, w: _Writer) -> str:
    from ..core.beta import CLIP

    a, b, c = (float(model.params[k]) for k in "abc")
    lo, hi = w.num(CLIP), w.num(1.0 - CLIP)
    x = f"(CASE WHEN {s} < {lo} THEN {lo} WHEN {s} > {hi} THEN {hi} ELSE {s} END)"
    z = f"({w.times(a, f'LN({x})')} - {w.times(b, f'LN(1.0e0 - {x})')} + {w.num(c)})"
    return (f"CASE WHEN {s} IS NULL THEN NULL WHEN {w.is_nan(s)} THEN {w.nan} "
            f"WHEN {z} > {w.num(EXP_LIMIT)} THEN 1.0e0 WHEN {z} < {w.num(-EXP_LIMIT)} THEN 0.0e0 "
            f"ELSE 1.0e0 / (1.0e0 + EXP(-{z})) END")


def binary_sql(model: Any, s: str, w: _Writer) -> str:
    """One binary CalibrationModel applied to the (already rendered) score ``s``."""
    if model.method == "beta":
        return w.double(_beta(model, s, w))
    pw = piecewise(model)
    if pw is None:
        return w.double(_sigmoid(model, s, w))
    parts = [f"CASE WHEN {s} IS NULL THEN NULL WHEN {w.is_nan(s)} THEN {w.nan}"]
    if pw.at_neg_inf is not None:
        parts.append(f" WHEN {s} = {w.neg_inf} THEN {w.num(pw.at_neg_inf)}")
    if pw.at_pos_inf is not None:
        parts.append(f" WHEN {s} = {w.inf} THEN {w.num(pw.at_pos_inf)}")
    chunk = _ARRAY_SLICE.get(w.dialect)
    search = _search(pw, s, w) if chunk is None else _array_search(pw, s, w) if chunk == 0 \
        else _search(pw, s, w, chunk)
    parts.append(f" ELSE {search} END")
    return w.double("".join(parts))


# -- combiners --------------------------------------------------------------------------

def ovr_normalise_sql(q: Sequence[str], dialect: str = "spark") -> list[str]:
    """One-vs-rest normalisation of K >= 3 calibrated expressions ``q`` (e.g. columns).

    p_k = q_k / (q_0 + ... + q_{K-1}), and 1/K where that sum is 0, as
    scikit-learn's ``CalibratedClassifierCV`` (and ``KeyedModel.predict``).
    Use it to normalise per-class columns computed in an inner query, so that
    each map is written once (``model.class_model(k).to_sql(...)``).
    """
    w = _Writer(dialect)
    return _normalise([w.expression(e, "a class expression") for e in q], w)


def _normalise(q: Sequence[str], w: _Writer) -> list[str]:
    k = len(q)
    total = "(" + " + ".join(q) + ")"
    return [w.double(f"CASE WHEN {total} = 0.0e0 THEN {w.num(1.0 / k)} ELSE {qk} / {total} END")
            for qk in q]


def _ovr(model: Any, scores: list[str], w: _Writer) -> list[str]:
    k = model.n_classes
    if k == 2:
        p1 = binary_sql(model.class_model(1), scores[-1], w)
        return [w.double(f"1.0e0 - {p1}"), p1]
    return _normalise([binary_sql(model.class_model(c), scores[c], w) for c in range(k)], w)


def _temperature(model: Any, scores: list[str], w: _Writer) -> list[str]:
    k = model.n_classes
    beta = float(model.beta)
    if len(scores) == 1:  # a binary score s is the logit pair (-s, s)
        logits = [f"(-{scores[0]})", scores[0]]
    elif model.params.get("input_") == "probabilities":
        # log(p + eps) as numpy takes it: -inf at 0, NaN below (PostgreSQL's LN refuses
        # 0 and negative numbers, Spark's is NULL); NULL stays NULL.
        xs = [f"({s} + {w.num(LOGIT_EPS)})" for s in scores]
        logits = [f"(CASE WHEN {x} < 0.0e0 THEN {w.nan} WHEN {x} = 0.0e0 THEN {w.neg_inf} "
                  f"ELSE LN({x}) END)" for x in xs]
    else:
        logits = list(scores)
    a = [f"({w.times(beta, z)})" for z in logits]
    m = "GREATEST(" + ", ".join(a) + ")"
    # exp(d) for d = beta z - m <= 0; below -708 its value (< 3.3e-308) is taken as 0.
    e = [f"CASE WHEN {ai} - {m} < {w.num(-EXP_LIMIT)} THEN 0.0e0 ELSE EXP({ai} - {m}) END"
         for ai in a]
    total = "(" + " + ".join(e) + ")"
    assert len(e) == k
    # +inf logits (inf - inf is NaN): their classes share 1 equally, as predict's limit.
    hit = [f"CASE WHEN {ai} = {w.inf} THEN 1.0e0 ELSE 0.0e0 END" for ai in a]
    top = f"{m} = {w.inf} AND NOT (" + " OR ".join(w.is_nan(ai) for ai in a) + ")"
    hits = "(" + " + ".join(hit) + ")"
    return [w.double(f"CASE WHEN {top} THEN ({hi}) / {hits} ELSE ({ei}) / {total} END")
            for hi, ei in zip(hit, e)]


def _combined(model: Any, scores: list[str], w: _Writer) -> list[str]:
    """The K expressions of one segment's multiclass model (or [p] of a binary one)."""
    if not is_keyed(model):
        return [binary_sql(model, scores[-1], w)]
    if model.method == "temperature":
        return _temperature(model, scores, w)
    return _ovr(model, scores, w)


def _by_segment(model: Any, scores: list[str], keys: list[str], w: _Writer) -> list[str]:
    """CASE over the fitted segments' keys, the global model in the ELSE."""
    table = model.segments
    table = table[~table["fallback"].astype(bool)]
    outs: list[list[str]] = [[] for _ in range(max(model.n_classes, 1))]
    for row in table[model.by].itertuples(index=False, name=None):
        cond = " AND ".join(f"{k} = {w.literal(v)}" for k, v in zip(keys, row))
        key = row[0] if len(row) == 1 else tuple(row)
        for c, expr in enumerate(_combined(model.segment(key), scores, w)):
            outs[c].append(f" WHEN {cond} THEN {expr}")
    glob = _combined(model.global_model, scores, w)
    return [f"CASE{''.join(arms)} ELSE {g} END" if arms else g
            for arms, g in zip(outs, glob)]


def to_sql(model: Any, score: str | Sequence[str] = "score", dialect: str = "spark",
           segments: str | Sequence[str] | None = None) -> str | list[str]:
    """The SQL expression(s) of ``model`` (see the module docstring).

    Parameters
    ----------
    model : CalibrationModel or KeyedModel
    score : str or list of str
        SQL expression of the score in ``dialect`` (usually a column name).
        Multiclass: a list of K expressions, one per class (K = 2: also one
        expression, the score of class 1; temperature: one logit s read as
        (-s, s)).
    dialect : {"spark", "duckdb", "postgres", "bigquery", "snowflake"}
    segments : str or list of str, optional
        SQL expressions of the segment keys, in the order of ``model.by``
        (default: the ``by`` column names).

    Returns
    -------
    str for a binary model; a list of K str (p_0 ... p_{K-1}) for a multiclass one.
    """
    w = _Writer(dialect)
    keyed = is_keyed(model)
    k = model.n_classes if keyed else 0
    if isinstance(score, str):
        scores = [score]
    else:
        scores = list(score)
        if k < 2:
            raise ValueError("score must be one SQL expression for a binary model; a list of "
                             "per-class expressions is for a multiclass one")
    if k >= 2 and len(scores) != k and not (k == 2 and len(scores) == 1):
        raise ValueError(f"score needs {k} expressions, one per class, got {len(scores)}")
    rendered = [w.expression(s, "score") for s in scores]
    by = list(model.by) if keyed else []
    if segments is not None and not by:
        raise ValueError("segments= is for a model fitted with by=")
    if by:
        if segments is None:  # the by columns, by name
            keys = [w.column(str(b)) for b in by]
        else:
            names = [segments] if isinstance(segments, str) else list(segments)
            if len(names) != len(by):
                raise ValueError(f"segments needs {len(by)} key expressions ({', '.join(by)}), "
                                 f"got {len(names)}")
            keys = [w.expression(n, "segment key") for n in names]
        out = _by_segment(model, rendered, keys, w)
    else:
        out = _combined(model, rendered, w)
    return out if k >= 2 else out[0]
