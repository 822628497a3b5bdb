"""The fitted calibration map: prediction, inspection, saving and loading.

A :class:`CalibrationModel` is small and engine-independent: the blocks of
an isotonic fit, the two numbers of a Platt fit, or the bins of a histogram.

Prediction, for a score s:

* isotonic, ``interpolation="linear"`` (scikit-learn's and Spark MLlib's):
  the knots are (score_min, prob) and (score_max, prob) of every block;
  p(s) interpolates linearly between neighbouring knots and is clipped to
  the first/last block's value outside the fitted range. An infinite knot
  bounds no segment: s = -inf gets the lowest block's value, +inf the
  highest's.
* isotonic, ``interpolation="step"``: p(s) is the value of the highest block
  whose lowest score is <= s, the lowest block's value below the range
  (AI::Calibrate's ``score_prob``, except below the range).
* sigmoid: p(s) = 1 / (1 + exp(a s + b)).
* histogram: the rate of the bin ``searchsorted(edges[1:-1], s)``.
* beta: p(s) = 1 / (1 + 1 / (exp(c) s^a / (1 - s)^b)), s clipped to
  [1e-12, 1 - 1e-12] (:mod:`distcal.core.beta`).
* venn_abers: p1 / (1 - p0 + p1) of the interval (p0, p1) that
  :meth:`CalibrationModel.predict_interval` gives (:mod:`distcal.core.venn_abers`).

NaN in gives NaN out.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .core.beta import beta_predict
from .core.bins import bin_ids
from .core.isotonic import Blocks
from .core.keyed import GLOBAL
from .core.sigmoid import sigmoid_predict
from .core.validate import as_scores
from .core.venn_abers import Steps
from .defaults import DEFAULTS, INTERPOLATIONS, METHOD_PARAMS, METHODS, STRATEGIES
from .errors import ModelError, ParameterError, short_repr, sums_overflow
from .model_format import _BLOCK_COLUMNS, _json_checksum, steps_table, write_model_dir
from .storage import filesystem_for, publish_dir

__all__ = ["CalibrationModel", "check_model", "read_model_json", "read_plain_file",
           "read_table_bytes", "read_table_file", "blocks_from_table", "parse_model_json",
           "steps_from_table", "check_steps"]


class CalibrationModel:
    """A fitted calibration map (see the module docstring for predictions).

    Made by :func:`distcal.fit` or :func:`distcal.load`; small and
    engine-independent (fit on Spark, predict in pandas).

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
    >>> model = distcal.fit(df)
    >>> model.blocks[["score_min", "score_max", "prob", "weight"]]
       score_min  score_max  prob  weight
    0        0.1        0.1   0.0     1.0
    1        0.3        0.5   0.5     2.0
    2        0.7        0.9   1.0     2.0
    >>> model.predict([0.2, 0.6, float("nan")])
    array([0.25, 0.75,  nan])

    Attributes: ``method``, ``params`` (method parameters and fitted
    values), ``n_rows`` (rows with weight > 0 used), ``weight_total``,
    ``dropped_rows``, and the column names used to fit (``columns``).
    """

    def __init__(self, method: str, params: dict[str, Any], blocks: Blocks | None = None,
                 *, n_rows: int = 0, weight_total: float = 0.0, dropped_rows: int = 0,
                 columns: dict[str, str | None] | None = None, steps: Steps | None = None):
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}")
        if (steps is not None) != (method == "venn_abers"):
            raise ValueError("a venn_abers model, and only one, has steps")
        self.method = method
        self.params = dict(params)
        self._blocks = blocks
        self._steps = steps
        self.n_rows = int(n_rows)
        self.weight_total = float(weight_total)
        self.dropped_rows = int(dropped_rows)
        self.columns = dict(columns or {})
        self._knots: tuple[np.ndarray, np.ndarray] | None = None
        _refuse_overflow(method, self.params, blocks, self.weight_total)

    # -- inspection -----------------------------------------------------
    @property
    def blocks(self) -> pd.DataFrame:
        """One row per block (isotonic) or non-empty bin (histogram), ascending."""
        b = self._fitted_blocks()
        out = pd.DataFrame({"score_min": b.score_min, "score_max": b.score_max,
                            "prob": b.prob, "weight": b.weight, "positives": b.positives})
        if b.score_mean is not None:
            out["score_mean"] = b.score_mean
        return out

    def mapping(self) -> list[tuple[float, float]]:
        """``(lowest score of the block, prob)`` per block, descending (AI::Calibrate)."""
        if self._blocks is None:
            raise AttributeError(f"a {self.method} model has no blocks to map")
        b = self._blocks
        return [(float(s), float(p)) for s, p in zip(b.score_min[::-1], b.prob[::-1])]

    def describe(self) -> str:
        """AI::Calibrate's ``print_mapping`` table, one line a block, from the top.

        Examples
        --------
        >>> import pandas as pd, distcal
        >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
        >>> print(distcal.fit(df, interpolation="step").describe())
        1.000 > SCORE >= 0.700     prob = 1.000
        0.700 > SCORE >= 0.300     prob = 0.500
        0.300 > SCORE >= 0.100     prob = 0.000
        """
        if self.method == "beta":
            a, b, c = (self.params[k] for k in "abc")
            return f"p(s) = 1 / (1 + 1 / (exp({c:.6g}) * s^{a:.6g} / (1 - s)^{b:.6g}))"
        if self._steps is not None:
            return (f"Venn-Abers predictor: p0 steps at {self._steps.x0.shape[0]} scores, "
                    f"p1 steps at {self._steps.x1.shape[0]} scores; p = p1 / (1 - p0 + p1)")
        if self._blocks is None:
            a, b = self.params["a"], self.params["b"]
            return f"p(s) = 1 / (1 + exp({a:.6g} * s + {b:+.6g}))"
        upper = max(1.0, float(self._blocks.score_max[-1]))
        lines = []
        for bound, prob in self.mapping():
            lines.append(f"{upper:0.3f} > SCORE >= {bound:0.3f}     prob = {prob:0.3f}")
            upper = bound
        return "\n".join(lines)

    def plot(self, ax: Any = None) -> Any:
        """The map score -> probability on matplotlib Axes (created if not given).

        Blocks or bins with their Wilson intervals (isotonic, histogram,
        MODL), or the sigmoid curve. Returns the Axes.
        """
        from .plots import plot_calibration_map

        return plot_calibration_map(self, ax)

    def __repr__(self) -> str:
        extra = (f"blocks={len(self._blocks)}" if self._blocks is not None
                 else f"steps={self._steps.x0.shape[0]}+{self._steps.x1.shape[0]}"
                 if self._steps is not None
                 else ", ".join(f"{k}={self.params[k]:.6g}" for k in "abc" if k in self.params))
        return (f"CalibrationModel(method={self.method!r}, n_rows={self.n_rows}, "
                f"weight_total={self.weight_total:g}, {extra})")

    def __eq__(self, other: object) -> bool:
        """Equal as distcal promises across engines and partitionings.

        Isotonic block boundaries, row counts and settings must match exactly;
        floating-point sums (weights, positives, probabilities, fitted
        parameters) to 1e-9 relative, since adding the same numbers in
        another order changes the last bits.
        """
        if not isinstance(other, CalibrationModel):
            return NotImplemented
        if (self.method, self.n_rows, self.dropped_rows, self.columns) != \
                (other.method, other.n_rows, other.dropped_rows, other.columns):
            return False
        if not (nearly_equal(self.params, other.params) and nearly_equal(self.weight_total,
                                                              other.weight_total)):
            return False
        if self._steps is not None or other._steps is not None:
            x, y = self._steps, other._steps
            # Step thresholds are data values: exact; step values are sums' ratios.
            return (x is not None and y is not None and np.array_equal(x.x0, y.x0)
                    and np.array_equal(x.x1, y.x1) and nearly_equal(x.v0, y.v0)
                    and nearly_equal(x.v1, y.v1))
        if (self._blocks is None) != (other._blocks is None):
            return False
        if self._blocks is None or other._blocks is None:
            return True
        a, b = self._blocks, other._blocks
        # Isotonic block bounds are data values: exact. Histogram bounds are
        # bin edges, computed (weighted quantiles): to rounding.
        same = np.array_equal if self.method == "isotonic" else nearly_equal
        return (len(a) == len(b) and same(a.score_min, b.score_min)
                and same(a.score_max, b.score_max)
                and all(nearly_equal(getattr(a, f), getattr(b, f))
                        for f in ("weight", "positives", "prob"))
                and (a.score_mean is None or b.score_mean is None
                     or nearly_equal(a.score_mean, b.score_mean)))

    __hash__ = None  # type: ignore[assignment]

    # -- prediction -----------------------------------------------------
    def predict(self, scores: Any) -> np.ndarray:
        """Probabilities for ``scores`` (array-like); NaN in gives NaN out."""
        s = as_scores(scores)  # real numbers only; a scalar gives one value
        if self.method == "sigmoid":
            return sigmoid_predict(self.params["a"], self.params["b"], s)
        if self.method == "beta":
            return beta_predict(self.params["a"], self.params["b"], self.params["c"], s)
        if self._steps is not None:
            return self._steps.predict(s)
        interpolation = self.params.get("interpolation", "linear")
        if self.method == "isotonic" and interpolation in ("linear", "centered"):
            return self._predict_linear(s)  # np.interp keeps NaN
        if self.method == "histogram":
            out = np.asarray(self.params["bin_prob"])[bin_ids(np.asarray(self.params["edges"]),
                                                              s)]
        else:
            b = self._fitted_blocks()
            idx = np.searchsorted(b.score_min, s, side="right") - 1
            out = b.prob[np.clip(idx, 0, len(b) - 1)]
        nan = np.isnan(s)
        if nan.any():
            out = np.where(nan, np.nan, out)
        return out

    @property
    def steps(self) -> pd.DataFrame:
        """The two step functions of a Venn-Abers model (venn_abers only).

        One row per threshold: ``kind`` 0 (p0: the value of the highest
        ``score`` <= s; 0 below the first) or 1 (p1: the value of the lowest
        ``score`` >= s; 1 above the last), ``score``, ``prob``; runs of equal
        values are one row.
        """
        if self._steps is None:
            raise AttributeError(f"a {self.method} model has no steps")
        return steps_table(self._steps).to_pandas()

    def predict_interval(self, scores: Any) -> tuple[np.ndarray, np.ndarray]:
        """The Venn-Abers interval (p0, p1) at ``scores``, p0 <= p1 (venn_abers only).

        p0 (p1): the isotonic fit at s of the calibration rows plus the row
        (s, 0) (plus (s, 1)) of weight 1 (:mod:`distcal.core.venn_abers`).
        NaN in gives NaN out.

        Examples
        --------
        >>> import pandas as pd, distcal
        >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
        >>> p0, p1 = distcal.fit(df, method="venn_abers").predict_interval([0.2, 0.8])
        >>> p0.tolist(), p1.tolist()
        ([0.0, 0.5], [0.6666666666666666, 1.0])
        """
        if self._steps is None:
            raise AttributeError(f"a {self.method} model has no interval; fit "
                                 "method='venn_abers'")
        return self._steps.interval(as_scores(scores))

    def block_arrays(self) -> Blocks:
        """The blocks of :attr:`blocks` as numpy arrays (read-only; no DataFrame).

        For code that reads thousands of maps, such as the transform of a
        model fitted with ``by=``: building :attr:`blocks` costs ~1 ms a map.
        """
        return self._fitted_blocks()

    def _fitted_blocks(self) -> Blocks:
        if self._blocks is None:
            raise AttributeError(f"a {self.method} model has no blocks; see model.params")
        return self._blocks

    def knots(self) -> tuple[np.ndarray, np.ndarray]:
        """The finite knots (x ascending, p) of a linear or centered isotonic map.

        "linear": (score_min, prob) and (score_max, prob) of every block;
        "centered": (score_mean, prob) of every block (Oron & Flournoy's
        centered isotonic regression). Predictions interpolate linearly
        between knots and are constant beyond the first and last; an
        infinite knot bounds no segment (see :meth:`predict`).
        """
        b = self._fitted_blocks()
        if self._knots is None:
            if self.params.get("interpolation", "linear") == "centered":
                if b.score_mean is None:
                    raise ModelError("a centered isotonic model needs the blocks' score_mean")
                x, y = b.score_mean, b.prob
            else:
                x = np.empty(2 * len(b))
                x[0::2], x[1::2] = b.score_min, b.score_max
                y = np.repeat(b.prob, 2)
            finite = np.isfinite(x)
            self._knots = (x[finite], y[finite])
        return self._knots

    def _predict_linear(self, s: np.ndarray) -> np.ndarray:
        b = self._fitted_blocks()
        x, y = self.knots()
        if x.shape[0] == 0:  # every fitted score was infinite
            ends = np.where(s > 0, b.prob[-1], b.prob[0])
            return np.where(np.isnan(s), np.nan, ends)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            out = np.interp(s, x, y)  # clips outside the knots: right for ±inf ...
        # Two knots closer than ~1e-308 with different values: an infinite slope
        # between them, taken as a step at the left knot (as the exports take it).
        # Two knots more than ~1.8e308 apart: their distance overflows, so the slope
        # is 0 and the left knot's value holds up to the right knot, as the exports
        # compute it too (np.interp mixes the two knots' values there).
        steep = ~np.isfinite(out) & np.isfinite(s)
        with np.errstate(over="ignore"):
            gaps = np.isinf(np.diff(x))
        if gaps.any():  # (a search of every score only for maps that have such a gap)
            left = np.searchsorted(x, s, side="right") - 1
            inside = (left >= 0) & (left < x.shape[0] - 1)
            steep[inside] |= gaps[left[inside]]
        if steep.any():
            out[steep] = y[np.searchsorted(x, s[steep], side="right") - 1]
        out[np.isnan(s)] = np.nan  # (np.interp with a single knot returns it for NaN too)
        # ... unless the lowest (highest) block has no finite knot: it holds only
        # -inf (+inf), or, centered, its mean is infinite.
        low, high = self.end_knots()
        if not np.isfinite(low):
            out[s == -np.inf] = b.prob[0]
        if not np.isfinite(high):
            out[s == np.inf] = b.prob[-1]
        return out

    def end_knots(self) -> tuple[float, float]:
        """The highest knot of the lowest block and the lowest knot of the highest block.

        Infinite when that block holds only -inf (+inf) scores or, centered,
        when its mean is infinite: such a block gets no finite knot, and only
        s = -inf (+inf) takes its probability.
        """
        b = self._fitted_blocks()
        if self.params.get("interpolation") == "centered" and b.score_mean is not None:
            return float(b.score_mean[0]), float(b.score_mean[-1])
        return float(b.score_max[0]), float(b.score_min[-1])

    def transform(self, data: Any, score_col: str = DEFAULTS.score_col,
                  output_col: str = DEFAULTS.output_col, *,
                  score_index: int | None = None,
                  interval_cols: tuple[str, str] | None = None) -> Any:
        """``data`` with ``output_col`` = ``predict(score_col)`` added.

        With ``score_index``, ``score_col`` holds vectors and the score is
        that element of each (as in :func:`distcal.fit`); the vector column
        is kept. ``interval_cols=("p0", "p1")`` (a Venn-Abers model, a
        column of numbers) adds the interval of :meth:`predict_interval`
        as two more columns, computed by ``predict`` on the workers.

        pandas in, pandas out; pyarrow in, pyarrow out; a Parquet path in,
        pandas out; Spark and Dask frames are transformed lazily by their
        engines (on Spark inside the JVM, on Dask per partition). An
        ``output_col`` that already exists in ``data`` is a
        :class:`~distcal.DataError`.

        Examples
        --------
        >>> import pandas as pd, distcal
        >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
        >>> distcal.fit(df).transform(df[["score"]], output_col="p")["p"].tolist()
        [0.0, 0.5, 0.5, 1.0, 1.0]
        """
        from .core.rows import read_score
        from .engines import engine_of, get_engine
        from .params import check_score_index

        check_interval_columns(self, interval_cols, output_col, score_index)
        index = check_score_index(score_index)

        def predict(part: Any) -> np.ndarray:
            return self.predict(read_score(part, score_col, index))

        out = get_engine(engine_of(data)).transform_rows(
            data, {score_col: "score"}, output_col, predict, vector=False, model=self,
            score_index=index)
        for j, name in enumerate(interval_cols or ()):
            out = get_engine(engine_of(out)).transform_rows(
                out, {score_col: "score"}, name, _IntervalPart(self._steps, score_col, j),
                vector=False)
        return out

    # -- export ---------------------------------------------------------
    def to_sql(self, score: str = DEFAULTS.score_col, dialect: str = "spark") -> str:
        """A SQL expression of the calibrated probability of ``score`` (docs/export.md).

        ``score`` is a SQL expression in ``dialect`` ("spark", "duckdb",
        "postgres", "bigquery", "snowflake"), usually a column name. The
        expression equals :meth:`predict` (the same double operations); NULL
        in gives NULL. The binary search over the thresholds is a loop for
        "spark" (``aggregate(...)``) and "duckdb" (``list_reduce(...)``,
        with nested ``CASE`` over slices of a large map) and nested ``CASE``
        for the other dialects.

        Examples
        --------
        >>> import pandas as pd, distcal
        >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
        >>> import duckdb
        >>> sql = distcal.fit(df, interpolation="step").to_sql("s", dialect="duckdb")
        >>> duckdb.sql(f"SELECT {sql} AS p FROM (VALUES (0.2), (0.8), (NULL)) t(s)").fetchall()
        [(0.0,), (1.0,), (None,)]
        """
        from .export.sql import to_sql

        out: str = to_sql(self, score, dialect)  # type: ignore[assignment]
        return out

    def to_onnx(self) -> Any:
        """An ``onnx.ModelProto``: double input "score" [N], double output "probability" [N].

        onnxruntime gives :meth:`predict` to 1e-12 (docs/export.md).
        """
        from .export.onnx_graph import to_onnx

        return to_onnx(self)

    # -- persistence ----------------------------------------------------
    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the model directory (:mod:`distcal.model_format`, the map of one key).

        ``path`` is a local path or any fsspec URL. The directory is written
        aside and committed into place (:mod:`distcal.storage`); an existing
        one is replaced only with ``overwrite=True``, and only once the new
        one is complete.
        """
        publish_dir(filesystem_for(os.fspath(path)), os.fspath(path), self.write_dir,
                    overwrite=overwrite)

    def write_dir(self, tmp: Path) -> None:
        """Write the model's files into the new local directory ``tmp``.

        A binary model is saved as the keyed model of its one key (no
        segment, no class): its settings in model.json, its fitted
        parameters, blocks or steps in the tables (:func:`distcal.load`
        gives it back as a CalibrationModel).
        """
        settings = METHOD_PARAMS[self.method]
        write_model_dir(tmp, self.method, {(GLOBAL, None): self}, by=[], n_classes=0,
                        params={k: v for k, v in self.params.items() if k in settings},
                        columns=self.columns, n_rows=self.n_rows,
                        weight_total=self.weight_total, dropped_rows=self.dropped_rows,
                        min_segment_weight=0.0, segments=None)


def check_interval_columns(model: Any, interval_cols: Any, output_col: str,
                           score_index: int | None = None) -> None:
    """``interval_cols`` (None: none asked) must be two new column names, other than
    ``output_col``, for a Venn-Abers model of a binary score (a column of numbers: no
    ``score_index``; with ``by`` or not): else a :class:`~distcal.ParameterError`."""
    if interval_cols is None:
        return
    names = list(interval_cols) if isinstance(interval_cols, (list, tuple)) else []
    binary = getattr(model, "n_classes", 1) < 2  # (a KeyedModel has classes)
    if model.method != "venn_abers" or not binary or score_index is not None or \
            len(names) != 2 or not all(isinstance(n, str) and n for n in names) or \
            len({*names, output_col}) != 3:
        raise ParameterError(
            "interval_cols takes two new column names, for a Venn-Abers model of a column "
            f"of numbers; got {interval_cols!r} for a {model.method} model"
            f"{'' if binary else ' of several classes'}")


class _IntervalPart:
    """p0 (``j = 0``) or p1 of the scores of one part of a frame (shipped to the workers)."""

    def __init__(self, steps: Any, score_col: str, j: int):
        self.steps, self.score_col, self.j = steps, score_col, j

    def __call__(self, part: Any) -> np.ndarray:
        from .core.rows import read_score

        out: np.ndarray = self.steps.interval(read_score(part, self.score_col))[self.j]
        return out


# The fitted numbers of the methods that are a formula (no blocks, no steps).
_FORMULA_PARAMS = {"sigmoid": ("a", "b"), "beta": ("a", "b", "c")}


def _refuse_overflow(method: str, params: dict[str, Any], blocks: Blocks | None,
                     weight_total: float) -> None:
    """:class:`DataError` instead of a model holding inf or NaN from overflowing sums.

    Weights are each finite, but their sums (and the sums a fit builds on
    them) can exceed the largest double; a model must never hold the NaN
    that follows.
    """
    bad = not math.isfinite(weight_total)
    if blocks is not None and len(blocks):
        with np.errstate(invalid="ignore"):
            bad = bad or not (np.all(np.isfinite(blocks.weight))
                              and np.all(np.isfinite(blocks.positives))
                              and not np.any(np.isnan(blocks.prob)))
    if method in _FORMULA_PARAMS:
        bad = bad or not all(isinstance(params.get(k), (int, float))
                             and math.isfinite(params[k]) for k in _FORMULA_PARAMS[method])
    elif method == "histogram" and "bin_prob" in params:
        bad = bad or not np.all(np.isfinite(np.asarray(params["bin_prob"], dtype=np.float64)))
    if bad:
        raise sums_overflow()


def nearly_equal(x: Any, y: Any, rtol: float = 1e-9, atol: float = 1e-12) -> bool:
    """Structural equality with floats compared to ``rtol`` (and ``atol`` near 0)."""
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(nearly_equal(x[k], y[k], rtol, atol) for k in x)
    if isinstance(x, (list, tuple, np.ndarray)) and isinstance(y, (list, tuple, np.ndarray)):
        xa, ya = np.asarray(x), np.asarray(y)
        if xa.shape != ya.shape:
            return False
        if xa.dtype.kind in "fiu" and ya.dtype.kind in "fiu":
            return bool(np.allclose(xa, ya, rtol=rtol, atol=atol, equal_nan=True))
        return all(nearly_equal(u, v, rtol, atol) for u, v in zip(x, y))
    if isinstance(x, (float, np.floating)) or isinstance(y, (float, np.floating)):
        if isinstance(x, bool) or isinstance(y, bool) or x is None or y is None:
            return x == y
        return bool(np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True))
    return x == y


# -- reading untrusted model directories ----------------------------------------

# model.json beyond this is not a model distcal wrote (a histogram of 1,000,000
# bins takes about 50 MB); tables beyond this neither.
MAX_JSON_BYTES = 128 << 20
MAX_TABLE_BYTES = 1 << 30
# model.json nests three levels; anything much deeper is not a model.
MAX_JSON_DEPTH = 32


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of the range of a float")
    return value


def _depth(doc: Any) -> int:
    """Nesting depth of a parsed JSON document, iteratively (no recursion)."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, d)
            if d > MAX_JSON_DEPTH:
                return d
            stack.extend((v, d + 1) for v in node)
    return deepest


def read_plain_file(root: Path, name: Any, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``name`` directly inside ``root``.

    A model directory is untrusted: ``name`` must be a plain file name (no
    separator, no ``..``, not absolute), the file must be a regular file
    (a symbolic link is refused, never followed; so are FIFOs and devices)
    and at most ``limit`` bytes. Anything else is a :class:`ModelError`.
    """
    if (not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name
            or "\x00" in name or os.path.isabs(name)):
        raise damaged(root, f"the {what} {str(name)[:80]!r} is not a plain file name inside "
                      "the model directory")
    path = root / name
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise ModelError(f"'{path}' is missing") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise ModelError(f"'{path}' is a symbolic link; a model directory holds regular "
                             "files only") from exc
        raise ModelError(f"cannot read '{path}': {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ModelError(f"'{path}' is not a regular file")
        if st.st_size > limit:
            raise ModelError(f"'{path}' is larger than {limit} bytes: not a distcal model file")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise ModelError(f"'{path}' is larger than {limit} bytes: not a distcal model "
                                 "file")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are distinct (Python keeps the last of a repeated key,
    other parsers the first: two readers would read two models)."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {twice[:40]!r} appears twice in an object")
    return doc


def parse_model_json(raw: Any, where: str | os.PathLike[str], what: str = "",
                     limit: int = MAX_JSON_BYTES) -> Any:
    """One JSON document read from a model directory, or :class:`ModelError` naming ``where``.

    The one parser of every JSON a model directory holds (each format's
    model.json, the parameters of each map in maps.parquet or in a 0.1
    segments.parquet): at most ``limit`` bytes, UTF-8, only finite numbers
    (no ``NaN``/``Infinity``, no float beyond the range of a double), at
    most :data:`MAX_JSON_DEPTH` levels. Python's parser recurses once per
    level, so a deeper document ends it with ``RecursionError``; that,
    like every other failure, is a ``ModelError`` ("nested too deeply").
    ``what`` names the document inside the file ("params of segment g=1: ").
    """
    if not isinstance(raw, (bytes, str)):
        raise damaged(where, f"{what}not JSON text")
    if len(raw) > limit:
        raise damaged(where, f"{what}larger than {limit} bytes")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        doc = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                         object_pairs_hook=_unique_keys)
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:  # UnicodeDecodeError too
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise damaged(where, f"{what}{why}") from exc
    if _depth(doc) > MAX_JSON_DEPTH:
        raise damaged(where, f"{what}nested too deeply")
    return doc


def damaged(where: str | os.PathLike[str], why: str) -> ModelError:
    """The error of a damaged model directory (or file) ``where``: ``why``."""
    return ModelError(f"'{where}' is damaged: {why}")


def read_model_json(root: Path, name: str = "model.json", noun: str = "model"
                    ) -> dict[str, Any]:
    """The parsed ``model.json`` of ``root``, or :class:`ModelError`.

    Read as :func:`parse_model_json` says; an object at the top. ``name``
    and ``noun`` ("summary.json", "summary") read a summary directory alike.
    """
    if not root.is_dir():
        what = "is a file, not a directory" if root.exists() else "does not exist"
        raise ModelError(f"{noun} directory '{root}' {what}")
    meta_path = root / name
    if not os.path.lexists(meta_path):
        raise ModelError(f"'{root}' is not a distcal {noun} (no {name})")
    raw = read_plain_file(root, name, MAX_JSON_BYTES, "metadata file")
    meta = parse_model_json(raw, meta_path)
    if not isinstance(meta, dict):
        raise ModelError(f"'{root}' is not a distcal {noun}")
    return meta


def read_checked_meta(root: Path, fmt: str, version: int, kind: str = "", *,
                      name: str = "model.json", noun: str = "model",
                      version_text: Callable[[Any], str] | None = None) -> dict[str, Any]:
    """``name`` (model.json) of ``root`` once it says format ``fmt``, version ``version``,
    checksum right.

    ``kind`` ("", "multiclass ", "segmented ") and ``noun`` ("model",
    "summary") name the directory in the messages; ``version_text`` shows
    a wrong version in them (default :func:`~distcal.errors.short_repr`).
    """
    meta = read_model_json(root, name, noun)
    if meta.get("format") != fmt:
        raise ModelError(f"'{root}' is not a distcal {kind}{noun}")
    if type(meta.get("format_version")) is not int or meta["format_version"] != version:
        raise ModelError(f"'{root}' has {kind}{noun} format version "
                         f"{(version_text or short_repr)(meta.get('format_version'))}; "
                         f"this distcal reads version {version}")
    if meta.get("checksum") != _json_checksum(meta):
        raise ModelError(f"'{root / name}' is damaged (checksum mismatch)")
    return meta


T = TypeVar("T")

# What a damaged model directory raises while it is read; all become ModelError.
DAMAGE_ERRORS = (KeyError, TypeError, ValueError, IndexError, OverflowError, AttributeError,
                 OSError, pa.ArrowException)


def build_or_damaged(root: Path, build: Callable[[], T]) -> T:
    """``build()``, with any error a damaged directory causes turned into ModelError."""
    try:
        return build()
    except ModelError:
        raise
    except DAMAGE_ERRORS as exc:
        raise damaged(root, str(exc)[:300]) from exc


def read_table_bytes(root: Path, info: Any, expected_file: str) -> bytes:
    """The bytes of the file a ``tables`` entry of model.json names, checked against its hash."""
    if not isinstance(info, dict) or info.get("file") != expected_file:
        raise damaged(root, f"a table entry does not name '{expected_file}'")
    data = read_plain_file(root, info["file"], MAX_TABLE_BYTES, "table file")
    if hashlib.sha256(data).hexdigest() != info.get("sha256"):
        raise ModelError(f"'{root / expected_file}' is missing or damaged (checksum mismatch)")
    return data


def read_table_file(root: Path, info: Any, expected_file: str) -> pa.Table:
    """The Parquet table of a ``tables`` entry of model.json, checked against its hash."""
    data = read_table_bytes(root, info, expected_file)
    try:
        # One thread, this one: a model's tables are small, and a read on Arrow's
        # thread pools leaves native threads alive that the interpreter's exit
        # can abort on ("terminate called without an active exception", Arrow
        # issue 34314; about 1 run in 40 after loading a segmented model).
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ModelError(f"'{root / expected_file}' is damaged: {exc}") from exc
    rows = info.get("rows")
    if isinstance(rows, bool) or not isinstance(rows, int) or table.num_rows != rows:
        raise ModelError(f"'{root / expected_file}' does not hold the expected rows")
    return table


def blocks_from_table(table: pa.Table, where: str, keys: tuple[str, ...] = ()) -> Blocks:
    """:class:`Blocks` from the five float columns of a blocks table."""
    cols = {}
    for f in _BLOCK_COLUMNS:
        if f not in table.schema.names or not pa.types.is_floating(table.schema.field(f).type):
            raise ModelError(f"{where} does not hold the expected blocks (column {f!r})")
        cols[f] = np.asarray(table.column(f).to_numpy(), dtype=np.float64)
    extra = set(table.schema.names) - set(_BLOCK_COLUMNS) - set(keys)
    if extra - {"score_mean"}:
        raise ModelError(f"{where} does not hold the expected blocks (columns "
                         f"{sorted(extra)})")
    mean = None
    if "score_mean" in extra:  # isotonic blocks: the weighted mean score of each block
        if not pa.types.is_floating(table.schema.field("score_mean").type):
            raise ModelError(f"{where} does not hold the expected blocks (column 'score_mean')")
        mean = np.asarray(table.column("score_mean").to_numpy(), dtype=np.float64)
    return Blocks(cols["score_min"], cols["score_max"], cols["weight"], cols["positives"],
                  cols["prob"], mean)


def checked_map(root: Path, where: str, method: Any, params: Any, blocks: Blocks | None,
                **parts: Any) -> CalibrationModel:
    """The map of one key read from ``root``: :func:`check_model`, then the model.

    What is inconsistent is a :class:`ModelError` naming the map (``where``).
    """
    try:
        check_model(method, params, blocks, **parts)
    except ValueError as exc:
        raise damaged(root, f"{where}: {exc}") from exc
    return CalibrationModel(method, params, blocks, **parts)


class MapRows:
    """The rows of each map in a table of every map's rows (blocks, steps) of ``root``.

    ``owner`` is the table's column of the map's number; :attr:`taken`
    counts the rows taken, so that rows of no map can be refused.
    """

    def __init__(self, root: Path, table: pa.Table | None, file: str, owner: str):
        ids = (np.zeros(0, dtype=np.int64) if table is None
               else table.column(owner).to_numpy().astype(np.int64))
        self.root, self.table, self.file, self.owner = root, table, file, owner
        self.total, self.taken = ids.shape[0], 0
        self._order = np.argsort(ids, kind="stable")
        self._sorted = ids[self._order]
        # Every map's blocks in map order, read once (a table per map costs ~0.1 ms:
        # models of 10^4 segments).
        self._all: Blocks | None = None

    def _rows_of(self, i: int) -> tuple[int, int]:
        lo, hi = np.searchsorted(self._sorted, [i, i + 1])
        self.taken += int(hi - lo)
        return int(lo), int(hi)

    def take(self, i: int) -> pa.Table | None:
        """Map ``i``'s rows, in the table's order (None without a table)."""
        lo, hi = self._rows_of(i)
        return None if self.table is None else self.table.take(pa.array(self._order[lo:hi]))

    def blocks(self, i: int, expected: Any, what: str,
               shown: Callable[[Any], str] = str, means: bool = False) -> Blocks | None:
        """Map ``i``'s blocks, ``expected`` of them (-1: none); ``score_mean`` all NaN:
        none, unless ``means`` (isotonic) and one block holds -inf and +inf (its mean).

        ``what`` names the map in messages, ``shown`` a wrong ``expected``.
        """
        if expected == -1:
            return None
        lo, hi = self._rows_of(i)
        if isinstance(expected, bool) or not isinstance(expected, int) or hi - lo != expected \
                or self.table is None:
            raise damaged(self.root, f"{what} has {hi - lo} blocks in the table, "
                          f"{shown(expected)} expected")
        if self._all is None:
            self._all = blocks_from_table(self.table.take(pa.array(self._order)),
                                          f"'{self.root / self.file}'", keys=(self.owner,))
        b = self._all
        mean = None if b.score_mean is None else b.score_mean[lo:hi]
        if mean is not None and np.all(np.isnan(mean)) and not (
                means and hi - lo == 1 and b.score_min[lo] == -math.inf
                and b.score_max[lo] == math.inf):
            mean = None
        return Blocks(b.score_min[lo:hi], b.score_max[lo:hi], b.weight[lo:hi],
                      b.positives[lo:hi], b.prob[lo:hi], mean)


def is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def is_count(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and v >= 0


def check_model(method: Any, params: Any, blocks: Blocks | None, *, n_rows: Any = 0,
                weight_total: Any = 0.0, dropped_rows: Any = 0, columns: Any = None,
                steps: Steps | None = None) -> None:
    """Raise ``ValueError`` naming what is inconsistent in a binary model's parts.

    Every parameter a method's prediction uses, of the right type; finite,
    ordered edges and block bounds; probabilities in [0, 1]; monotone blocks
    for isotonic regression.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}")
    if not isinstance(params, dict):
        raise ValueError("params is not a mapping")
    if not (is_count(n_rows) and is_count(dropped_rows)):
        raise ValueError("n_rows and dropped_rows must be integers >= 0")
    if not (is_number(weight_total) and weight_total >= 0):
        raise ValueError(f"weight_total must be a finite number >= 0, got {weight_total!r}")
    if columns is not None and not (isinstance(columns, dict) and all(
            isinstance(k, str) and (v is None or isinstance(v, str))
            for k, v in columns.items())):
        raise ValueError("columns must map roles to column names")
    if (steps is not None) != (method == "venn_abers"):
        raise ValueError("a venn_abers model, and only one, has a steps table")
    if method in ("venn_abers", *_FORMULA_PARAMS) and blocks is not None:
        raise ValueError(f"a {method} model has no blocks table")
    if steps is not None:
        check_steps(steps)
        return
    if method in _FORMULA_PARAMS:
        for k in _FORMULA_PARAMS[method]:
            if not is_number(params.get(k)):
                raise ValueError(f"{method} parameter {k} must be a finite number, got "
                                 f"{params.get(k)!r}")
        if method == "beta" and not (min(params["a"], params["b"]) >= 0 or params["a"] == 0
                                     or params["b"] == 0):
            # (the refit rule, as betacal's, leaves the parameter it refits unchecked)
            raise ValueError("beta parameters a and b must be >= 0, or one of them 0 (the "
                             "fit's refit rule)")
        return
    if blocks is None:
        raise ValueError(f"the {method} model has no blocks table")
    _check_blocks(method, blocks)
    if method == "isotonic":
        inc = params.get("increasing")
        if not (inc is True or inc is False or inc == "auto"):
            raise ValueError(f"increasing must be true, false or 'auto', got {inc!r}")
        if params.get("interpolation") not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got "
                             f"{params.get('interpolation')!r}")
        if params.get("interpolation") == "centered" and blocks.score_mean is None:
            raise ValueError("a centered isotonic model needs the blocks' score_mean")
        for k in ("y_min", "y_max"):
            v = params.get(k)
            if v is not None and not (is_number(v) and 0.0 <= v <= 1.0):
                raise ValueError(f"{k} must be null or a number in [0, 1], got {v!r}")
        direction = params.get("increasing_", inc)
        if direction is not True and direction is not False:
            raise ValueError(f"increasing_ must be true or false, got {direction!r}")
        step = np.diff(blocks.prob)
        if np.any(step < 0) if direction else np.any(step > 0):
            raise ValueError("the block probabilities are not monotone in the fitted "
                             "direction")
    elif method == "histogram":
        n_bins, edges, rate = params.get("n_bins"), params.get("edges"), params.get("bin_prob")
        if isinstance(n_bins, bool) or not isinstance(n_bins, int) or \
                not 1 <= n_bins <= 1_000_000:
            raise ValueError(f"n_bins must be an integer from 1 to 1000000, got {n_bins!r}")
        if params.get("strategy") not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got "
                             f"{params.get('strategy')!r}")
        if not (isinstance(edges, list) and len(edges) == n_bins + 1
                and all(is_number(e) for e in edges)):
            raise ValueError(f"edges must be {n_bins + 1} finite numbers")
        if not (isinstance(rate, list) and len(rate) == n_bins
                and all(is_number(r) and 0.0 <= r <= 1.0 for r in rate)):
            raise ValueError(f"bin_prob must be {n_bins} probabilities in [0, 1]")
        e = np.asarray(edges, dtype=np.float64)
        if np.any(np.diff(e) < 0):
            raise ValueError("edges are not in ascending order")
        if np.any(blocks.score_min < e[0]) or np.any(blocks.score_max > e[-1]):
            raise ValueError("blocks lie outside the bin edges")
    elif method == "modl":
        if not is_number(params.get("cost")):
            raise ValueError(f"cost must be a finite number, got {params.get('cost')!r}")
        if not isinstance(params.get("exact"), bool):
            raise ValueError(f"exact must be true or false, got {params.get('exact')!r}")


def _check_blocks(method: str, b: Blocks) -> None:
    n = len(b)
    if n == 0:
        raise ValueError("the blocks table is empty")
    if any(getattr(b, f).shape != (n,) for f in _BLOCK_COLUMNS):
        raise ValueError("the blocks columns differ in length")
    if np.any(np.isnan(b.score_min)) or np.any(np.isnan(b.score_max)):
        raise ValueError("block bounds are NaN")
    if method == "histogram" and not (np.all(np.isfinite(b.score_min))
                                      and np.all(np.isfinite(b.score_max))):
        raise ValueError("histogram block bounds must be finite")
    if np.any(b.score_min > b.score_max):
        raise ValueError("a block's score_min exceeds its score_max")
    if n > 1:
        below, above = b.score_max[:-1], b.score_min[1:]
        ordered = np.all(above >= below) if method == "histogram" else np.all(above > below)
        if not ordered:
            raise ValueError("blocks are not in ascending, non-overlapping score order")
    if not np.all((b.prob >= 0.0) & (b.prob <= 1.0)):  # NaN fails too
        raise ValueError("block probabilities must lie in [0, 1]")
    if not (np.all(np.isfinite(b.weight)) and np.all(b.weight > 0)):
        raise ValueError("block weights must be finite and > 0")
    if not (np.all(np.isfinite(b.positives)) and np.all(b.positives >= 0)
            and np.all(b.positives <= b.weight * (1.0 + 1e-9))):
        raise ValueError("block positives must be finite and in [0, weight]")
    if b.score_mean is not None:
        m = b.score_mean
        # (the mean of a block holding -inf and +inf is NaN)
        if m.shape != (n,) or not np.all((m >= b.score_min) & (m <= b.score_max) | (
                (b.score_min == -np.inf) & (b.score_max == np.inf) & np.isnan(m))):
            raise ValueError("block score_mean must lie in [score_min, score_max]")


def steps_from_table(table: pa.Table, where: str, keys: tuple[str, ...] = ()) -> Steps:
    """:class:`~distcal.core.venn_abers.Steps` from a table of
    :func:`~distcal.model_format.steps_table` (unchecked)."""
    if set(table.schema.names) - set(keys) != {"kind", "score", "prob"} or not (
            pa.types.is_integer(table.schema.field("kind").type)
            and pa.types.is_floating(table.schema.field("score").type)
            and pa.types.is_floating(table.schema.field("prob").type)):
        raise ModelError(f"{where} does not hold the expected Venn-Abers steps")
    kind = np.asarray(table.column("kind").to_numpy(), dtype=np.int64)
    x = np.asarray(table.column("score").to_numpy(), dtype=np.float64)
    v = np.asarray(table.column("prob").to_numpy(), dtype=np.float64)
    if not np.all((kind == 0) | (kind == 1)):
        raise ModelError(f"{where} has steps of an unknown kind")
    return Steps(x[kind == 0], v[kind == 0], x[kind == 1], v[kind == 1])


def check_steps(steps: Steps) -> None:
    """Raise ``ValueError`` unless the steps make a Venn-Abers predictor.

    Thresholds strictly ascending, not NaN, the same first score for p0 and
    last for p1 (the fitted range); values in [0, 1], non-decreasing, and
    p0 <= p1 at every threshold.
    """
    for x, v, name in ((steps.x0, steps.v0, "p0"), (steps.x1, steps.v1, "p1")):
        if x.shape[0] == 0 or x.shape != v.shape:
            raise ValueError(f"the {name} steps are empty or of unequal lengths")
        if np.any(np.isnan(x)) or np.any(np.diff(x) <= 0):
            raise ValueError(f"the {name} step scores are not strictly ascending")
        if not np.all((v >= 0.0) & (v <= 1.0)) or np.any(np.diff(v) < 0):
            raise ValueError(f"the {name} step values are not non-decreasing in [0, 1]")
    if steps.x1[0] < steps.x0[0]:
        raise ValueError("the p1 steps begin below the fitted scores")
    if steps.x1[-1] < steps.x0[-1]:
        raise ValueError("the p0 steps end above the fitted scores")
    at = np.concatenate([steps.x0, steps.x1])
    p0, p1 = steps.interval(at)
    if np.any(p0 > p1):
        raise ValueError("p0 exceeds p1 at some score")
