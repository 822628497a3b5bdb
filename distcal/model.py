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

NaN in gives NaN out.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .core.bins import bin_ids
from .core.isotonic import Blocks
from .core.sigmoid import sigmoid_predict
from .defaults import DEFAULTS
from .errors import ModelError
from .storage import filesystem_for, publish_dir

__all__ = ["CalibrationModel", "load_dir"]

FORMAT = "distcal-model"
FORMAT_VERSION = 1
_BLOCK_COLUMNS = ("score_min", "score_max", "prob", "weight", "positives")


def _library_version() -> str:
    from . import __version__

    return __version__


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
                 columns: dict[str, str | None] | None = None):
        if method not in ("isotonic", "sigmoid", "histogram", "modl"):
            raise ValueError(f"unknown method {method!r}")
        self.method = method
        self.params = dict(params)
        self._blocks = blocks
        self.n_rows = int(n_rows)
        self.weight_total = float(weight_total)
        self.dropped_rows = int(dropped_rows)
        self.columns = dict(columns or {})
        self._knots: tuple[np.ndarray, np.ndarray] | None = None

    # -- inspection -----------------------------------------------------
    @property
    def blocks(self) -> pd.DataFrame:
        """One row per block (isotonic) or non-empty bin (histogram), ascending."""
        if self._blocks is None:
            raise AttributeError(f"a {self.method} model has no blocks; see model.params")
        b = self._blocks
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
                 else f"a={self.params['a']:.6g}, b={self.params['b']:.6g}")
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
        if not (_close(self.params, other.params) and _close(self.weight_total,
                                                              other.weight_total)):
            return False
        if (self._blocks is None) != (other._blocks is None):
            return False
        if self._blocks is None or other._blocks is None:
            return True
        a, b = self._blocks, other._blocks
        # Isotonic block bounds are data values: exact. Histogram bounds are
        # bin edges, computed (weighted quantiles): to rounding.
        same = np.array_equal if self.method == "isotonic" else _close
        return (len(a) == len(b) and same(a.score_min, b.score_min)
                and same(a.score_max, b.score_max)
                and all(_close(getattr(a, f), getattr(b, f))
                        for f in ("weight", "positives", "prob"))
                and (a.score_mean is None or b.score_mean is None
                     or _close(a.score_mean, b.score_mean)))

    __hash__ = None  # type: ignore[assignment]

    # -- prediction -----------------------------------------------------
    def predict(self, scores: Any) -> np.ndarray:
        """Probabilities for ``scores`` (array-like); NaN in gives NaN out."""
        s = np.asarray(scores, dtype=np.float64)
        if self.method == "sigmoid":
            return sigmoid_predict(self.params["a"], self.params["b"], s)
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
        out = np.interp(s, x, y)  # clips outside the knots: right for ±inf ...
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
                  output_col: str = DEFAULTS.output_col) -> Any:
        """``data`` with ``output_col`` = ``predict(score_col)`` added.

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
        from .engines import engine_of, get_engine

        return get_engine(engine_of(data)).transform(self, data, score_col, output_col)

    # -- persistence ----------------------------------------------------
    def _metadata(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": FORMAT_VERSION,
                "library_version": _library_version(), "method": self.method,
                "params": self.params, "columns": self.columns, "n_rows": self.n_rows,
                "weight_total": self.weight_total, "dropped_rows": self.dropped_rows}

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the model directory: ``model.json`` + ``blocks.parquet``.

        ``path`` is a local path or any fsspec URL. The directory is written
        aside and committed into place (:mod:`distcal.storage`); an existing
        one is replaced only with ``overwrite=True``, and only once the new
        one is complete.
        """
        publish_dir(filesystem_for(os.fspath(path)), os.fspath(path), self.write_dir,
                    overwrite=overwrite)

    def write_dir(self, tmp: Path) -> None:
        """Write the model's files into the new local directory ``tmp``."""
        tmp.mkdir()
        meta = self._metadata()
        meta["tables"] = {}
        if self._blocks is not None:
            columns = _BLOCK_COLUMNS + (("score_mean",) if self._blocks.score_mean is not None
                                        else ())
            table = pa.table({f: pa.array(getattr(self._blocks, f), type=pa.float64())
                              for f in columns})
            pq.write_table(table, tmp / "blocks.parquet")
            meta["tables"]["blocks"] = {"file": "blocks.parquet", "rows": table.num_rows,
                                        "sha256": _sha256(tmp / "blocks.parquet")}
        meta["checksum"] = _json_checksum(meta)
        with open(tmp / "model.json", "w") as fh:
            json.dump(meta, fh, indent=2, sort_keys=True, allow_nan=True)
            fh.write("\n")


def _close(x: Any, y: Any, rtol: float = 1e-9, atol: float = 1e-12) -> bool:
    """Structural equality with floats compared to ``rtol`` (and ``atol`` near 0)."""
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k], rtol, atol) for k in x)
    if isinstance(x, (list, tuple, np.ndarray)) and isinstance(y, (list, tuple, np.ndarray)):
        xa, ya = np.asarray(x), np.asarray(y)
        if xa.shape != ya.shape:
            return False
        if xa.dtype.kind in "fiu" and ya.dtype.kind in "fiu":
            return bool(np.allclose(xa, ya, rtol=rtol, atol=atol, equal_nan=True))
        return all(_close(u, v, rtol, atol) for u, v in zip(x, y))
    if isinstance(x, (float, np.floating)) or isinstance(y, (float, np.floating)):
        if isinstance(x, bool) or isinstance(y, bool) or x is None or y is None:
            return x == y
        return bool(np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True))
    return x == y


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _json_checksum(meta: dict[str, Any]) -> str:
    body = {k: v for k, v in meta.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def load_dir(root: Path) -> CalibrationModel:
    """Read the binary model directory ``root`` of this machine (see :func:`distcal.load`).

    Raises :class:`~distcal.ModelError` when the directory is missing, not a
    distcal model, of an unknown format version, or damaged. Nothing in the
    directory is executed.
    """
    meta_path = root / "model.json"
    if not root.is_dir():
        raise ModelError(f"model directory '{root}' does not exist")
    if not meta_path.is_file():
        raise ModelError(f"'{root}' is not a distcal model (no model.json)")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"'{meta_path}' is damaged: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelError(f"'{root}' is not a distcal model")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelError(f"'{root}' has model format version {meta.get('format_version')!r}; "
                         f"this distcal reads version {FORMAT_VERSION}")
    if meta.get("checksum") != _json_checksum(meta):
        raise ModelError(f"'{meta_path}' is damaged (checksum mismatch)")
    try:
        blocks = None
        tables = meta["tables"]
        if "blocks" in tables:
            info = tables["blocks"]
            file = root / info["file"]
            if not file.is_file() or _sha256(file) != info["sha256"]:
                raise ModelError(f"'{file}' is missing or damaged (checksum mismatch)")
            t = pq.read_table(file)
            names = set(t.schema.names)
            if t.num_rows != info["rows"] or names - {"score_mean"} != set(_BLOCK_COLUMNS):
                raise ModelError(f"'{file}' does not hold the expected blocks")
            smin, smax, weight, positives, prob = (
                t.column(f).to_numpy() for f in
                ("score_min", "score_max", "weight", "positives", "prob"))
            blocks = Blocks(smin, smax, weight, positives, prob,
                            score_mean=t.column("score_mean").to_numpy()
                            if "score_mean" in names else None)
        model = CalibrationModel(meta["method"], meta["params"], blocks, n_rows=meta["n_rows"],
                                 weight_total=meta["weight_total"],
                                 dropped_rows=meta["dropped_rows"], columns=meta["columns"])
    except ModelError:
        raise
    except (KeyError, TypeError, ValueError, OSError, pa.ArrowException) as exc:
        raise ModelError(f"'{root}' is damaged: {exc}") from exc
    if model.method in ("isotonic", "histogram") and blocks is None:
        raise ModelError(f"'{root}' is damaged: the {model.method} model has no blocks table")
    return model
