"""Multiclass calibration: one-vs-rest (isotonic, sigmoid, histogram) and temperature scaling.

The scores of a row are K >= 2 per-class values, in one vector column
(``score_col``: pandas column of numpy arrays or lists, pyarrow list or
fixed-size list) or in K columns (``score_cols=[c0, c1, ...]``); the label
is the class index 0..K-1. A single score column (or vectors of length 1)
is a binary problem (K = 2) whose score belongs to class 1.

* ``method="isotonic" | "sigmoid" | "histogram"``: one-vs-rest as
  scikit-learn's ``CalibratedClassifierCV``: class k is calibrated on its
  own score against ``label == k`` (with the weights) by :func:`distcal.fit`,
  then each row is divided by its sum (1/K where the sum is 0). With K = 2
  only class 1 is calibrated (on the last score column) and p0 = 1 - p1.
* ``method="temperature"``: p = softmax(beta * logits) with one beta > 0
  minimising the weighted multinomial log loss exactly
  (:mod:`distcal.core.temperature`). Scores are logits, unless they look
  like ``predict_proba`` output (all in [0, 1], rows summing to 1), which
  become log(p + 1e-12); one column s is the logit pair (-s, s)
  (:func:`distcal.core.multiclass.to_logits`, scikit-learn's rule, applied
  to the rows given at fit and, again, to the rows given at prediction).

Models are saved as a directory: ``model.json`` (format
``distcal-multiclass-model``, checksums) and, when a class has blocks,
``classes.parquet`` with the per-class blocks keyed by a ``class`` column.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from .core.distinct import DistinctTable, pool_ties
from .core.multiclass import normalise_ovr, pool_one_vs_rest, to_logits
from .core.temperature import (
    center_logits,
    fit_temperature,
    sample_start,
    softmax_predict,
    temperature_sums,
)
from .core.validate import as_scores
from .errors import DataError, ModelError
from .model import (
    CalibrationModel,
    _close,
    _json_checksum,
    _sha256,
    blocks_from_table,
    build_or_damaged,
    check_model,
    read_checked_meta,
    read_model_json,
    read_table_file,
)
from .multiclass_rows import (
    Problems,
    check_score_args,
    open_input,
    read_fit_input,
    read_scores,
    score_names,
)

__all__ = ["MulticlassCalibrationModel", "fit_multiclass", "load_multiclass",
           "is_multiclass_model", "FORMAT", "FORMAT_VERSION", "METHODS"]

FORMAT = "distcal-multiclass-model"
FORMAT_VERSION = 1
METHODS = ("isotonic", "sigmoid", "histogram", "temperature")
_BLOCK_COLUMNS = ("score_min", "score_max", "prob", "weight", "positives")
_TABLE_FILE = "classes.parquet"


def _library_version() -> str:
    from . import __version__

    return __version__


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

class MulticlassCalibrationModel:
    """A fitted multiclass calibration map.

    Attributes
    ----------
    method : str
        "isotonic", "sigmoid", "histogram" (one-vs-rest) or "temperature".
    classes : list of int
        ``[0, 1, ..., K-1]``.
    params : dict
        The method parameters given to the fit; for temperature scaling also
        ``beta``, ``temperature`` (= 1 / beta) and ``input_`` ("logits" or
        "probabilities": how the fit read its scores).
    n_rows, weight_total, dropped_rows, columns
        Rows used (weight > 0), their total weight, rows dropped as invalid,
        and the column names of the fit.

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> from distcal.multiclass import fit_multiclass
    >>> df = pd.DataFrame({"s0": [.8, .1, .2, .6, .1, .3], "s1": [.1, .7, .2, .3, .8, .3],
    ...                    "s2": [.1, .2, .6, .1, .1, .4], "label": [0, 1, 2, 0, 1, 2]})
    >>> model = fit_multiclass(df, method="temperature", score_cols=["s0", "s1", "s2"])
    >>> p = model.predict([[.8, .1, .1]])
    >>> p.shape, bool(abs(p.sum() - 1) < 1e-12)
    ((1, 3), True)
    >>> model.classes
    [0, 1, 2]
    """

    def __init__(self, method: str, n_classes: int, params: dict[str, Any],
                 class_models: list[CalibrationModel | None] | None = None, *,
                 n_rows: int = 0, weight_total: float = 0.0, dropped_rows: int = 0,
                 columns: dict[str, Any] | None = None):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        k = int(n_classes)
        if k < 2:
            raise ValueError(f"a multiclass model needs K >= 2 classes, got {n_classes!r}")
        if method == "temperature":
            beta = float(params["beta"])
            if not (np.isfinite(beta) and beta > 0):
                raise ValueError(f"beta must be finite and > 0, got {beta!r}")
            class_models = None
        else:
            if class_models is None or len(class_models) != k:
                raise ValueError(f"a one-vs-rest model needs {k} class models")
            for i, m in enumerate(class_models):
                if (m is None) != (k == 2 and i == 0):
                    raise ValueError("a one-vs-rest model has a model for every class, "
                                     "except class 0 when K = 2")
                if m is not None and m.method != method:
                    raise ValueError(f"class {i} model is {m.method!r}, not {method!r}")
        self.method = method
        self.n_classes = k
        self.params = dict(params)
        self._class_models = None if class_models is None else list(class_models)
        self.n_rows = int(n_rows)
        self.weight_total = float(weight_total)
        self.dropped_rows = int(dropped_rows)
        self.columns = dict(columns or {})

    @property
    def classes(self) -> list[int]:
        """The class indices ``[0, ..., K-1]``."""
        return list(range(self.n_classes))

    def _ovr_models(self) -> list[CalibrationModel | None]:
        """The per-class models (one-vs-rest; None for class 0 when K = 2)."""
        if self._class_models is None:
            raise ValueError("a temperature-scaling model has no per-class models")
        return self._class_models

    def _ovr_model(self, k: int) -> CalibrationModel:
        """The model of class ``k``, which must have one (one-vs-rest)."""
        m = self._ovr_models()[k]
        if m is None:
            raise ValueError(f"class {k} has no model (p0 = 1 - p1 when K = 2)")
        return m

    @property
    def beta(self) -> float:
        """The inverse temperature (temperature scaling only)."""
        if self.method != "temperature":
            raise AttributeError(f"a {self.method} (one-vs-rest) model has no beta")
        return float(self.params["beta"])

    def class_model(self, k: int) -> CalibrationModel:
        """The binary :class:`~distcal.CalibrationModel` of class ``k`` (one-vs-rest).

        With K = 2 only class 1 has one (p0 = 1 - p1). Temperature scaling
        has no per-class models (one beta for all classes): ValueError.
        """
        if self.method == "temperature":
            raise ValueError("a temperature-scaling model has no per-class models: one "
                             f"inverse temperature for all classes (beta = {self.beta:.6g})")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) \
                or not 0 <= k < self.n_classes:
            raise ValueError(f"class must be one of {self.classes}, got {k!r}")
        m = self._ovr_models()[int(k)]
        if m is None:
            raise ValueError("with K = 2 only class 1 is calibrated (as scikit-learn does); "
                             "p0 = 1 - p1: use class_model(1)")
        return m

    # -- inspection -----------------------------------------------------
    def describe(self) -> str:
        """A text summary, one section per class (one line for temperature scaling)."""
        if self.method == "temperature":
            return (f"p = softmax(beta * logits) over {self.n_classes} classes, "
                    f"beta = {self.beta:.6g} (temperature = {1.0 / self.beta:.6g})")
        out = []
        for k in self.classes:
            out.append(f"class {k}:")
            m = self._ovr_models()[k]
            body = "p0 = 1 - p1" if m is None else m.describe()
            out.append(textwrap.indent(body, "  "))
        return "\n".join(out)

    def __repr__(self) -> str:
        extra = (f"beta={self.beta:.6g}" if self.method == "temperature"
                 else "one-vs-rest")
        return (f"MulticlassCalibrationModel(method={self.method!r}, K={self.n_classes}, "
                f"n_rows={self.n_rows}, weight_total={self.weight_total:g}, {extra})")

    def __eq__(self, other: object) -> bool:
        """Equal settings, counts and class models; floats to 1e-9 relative."""
        if not isinstance(other, MulticlassCalibrationModel):
            return NotImplemented
        if (self.method, self.n_classes, self.n_rows, self.dropped_rows, self.columns) != \
                (other.method, other.n_classes, other.n_rows, other.dropped_rows,
                 other.columns):
            return False
        if not (_close(self.params, other.params)
                and _close(self.weight_total, other.weight_total)):
            return False
        if self._class_models is None or other._class_models is None:
            return self._class_models is other._class_models
        return all((a is None and b is None) or (a is not None and b is not None and a == b)
                   for a, b in zip(self._class_models, other._class_models))

    __hash__ = None  # type: ignore[assignment]

    # -- prediction -----------------------------------------------------
    def predict(self, scores: Any, _logits: str = "auto") -> np.ndarray:
        """Calibrated probabilities, shape (n, K), rows summing to 1.

        ``scores``: (n, K) per-class scores; with K = 2 also (n,) or (n, 1),
        the score of class 1. A row with NaN gives a NaN row.

        Examples
        --------
        >>> import pandas as pd
        >>> df = pd.DataFrame({"s": [[-1.0, 1.0], [1.0, -1.0], [0.5, -0.5]], "y": [1, 0, 1]})
        >>> model = fit_multiclass(df, method="temperature", score_col="s", label_col="y")
        >>> model.predict([[2.0, -2.0]]).round(4).tolist() == \
softmax_predict(np.array([[2.0, -2.0]]), model.beta).round(4).tolist()
        True
        """
        s = as_scores(scores)  # real numbers only (no complex, dates, durations)
        if s.ndim == 1 and self.n_classes == 2:
            s = s.reshape(-1, 1)
        if s.ndim != 2:
            raise DataError(f"scores must be a 2-d array (n, {self.n_classes}), got shape "
                            f"{s.shape}")
        if s.shape[1] != self.n_classes and not (self.n_classes == 2 and s.shape[1] == 1):
            raise DataError(f"scores have {s.shape[1]} columns; the model has K = "
                            f"{self.n_classes} classes")
        if self.method == "temperature":
            # _logits: "logits"/"probabilities" when a cluster engine decided
            # scikit-learn's rule over all partitions (else over these rows).
            return softmax_predict(to_logits(s, _logits), self.beta)
        q = np.zeros((s.shape[0], self.n_classes))
        if self.n_classes == 2:
            q[:, 1] = self._ovr_model(1).predict(s[:, -1])
        else:
            for k in self.classes:
                q[:, k] = self._ovr_model(k).predict(np.ascontiguousarray(s[:, k]))
        return normalise_ovr(q)

    def transform(self, data: Any, score_col: str | None = None,
                  score_cols: list[str] | None = None,
                  output_col: str = "calibrated", _logits: str = "auto") -> Any:
        """``data`` with ``output_col`` = the calibrated probability vector of each row.

        Scores are read from ``score_col`` (a vector column) or
        ``score_cols`` (one column per class); neither: the columns of the
        fit. pandas in: pandas out, the new column holding one float64
        numpy array per row; pyarrow in: pyarrow out, a ``list<double>``
        column; a Parquet path: pandas out. Null or NaN scores give NaN
        probabilities; ragged vectors raise :class:`~distcal.DataError`.
        Spark in: Spark out, an ``array<double>`` column computed in the JVM
        (per-class interpolation and normalisation, or softmax, as SQL);
        Dask in: Dask out, per partition.
        """
        if score_col is None and score_cols is None:
            score_col, score_cols = self.columns.get("score"), self.columns.get("scores")
        score_cols = check_score_args(score_col, score_cols)
        names = score_names(score_col, score_cols)
        from .engines import engine_of

        engine = engine_of(data)
        if engine == "spark":
            from .engines.spark.multiclass_transform import transform_multiclass

            return transform_multiclass(self, data, score_col, score_cols, output_col)
        if engine == "dask":
            from .engines.dask_multiclass import transform_multiclass as dask_transform

            return dask_transform(self, data, score_col, score_cols, output_col)
        source = open_input(data, names)
        if isinstance(data, (str, os.PathLike)):
            data = ds.dataset(os.fspath(data), format="parquet",
                              partitioning="hive").to_table().to_pandas()
        n = len(source) if isinstance(source, pd.DataFrame) else source.num_rows
        problems = Problems(n)
        s = read_scores(source, score_col, score_cols, problems, finite=False)
        fatal = [(c, p, k) for c, p, k in problems.items
                 if k and ("ragged" in p or "text" in p)]
        if fatal:
            problems.items = fatal
            raise DataError(problems.message())
        probs = self.predict(s, _logits)
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        if isinstance(data, pa.Table):
            k = probs.shape[1]
            col = pa.ListArray.from_arrays(pa.array(np.arange(0, n * k + 1, k, dtype=np.int32)),
                                           pa.array(probs.ravel(), type=pa.float64()))
            if output_col in data.schema.names:
                return data.set_column(data.schema.get_field_index(output_col), output_col, col)
            return data.append_column(output_col, col)
        out = data.copy(deep=False)
        out[output_col] = list(probs)
        return out

    # -- persistence ----------------------------------------------------
    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the model directory: ``model.json`` (+ ``classes.parquet``).

        Written aside and renamed into place; an existing directory is
        replaced only with ``overwrite=True``. No pickle: JSON and Parquet.
        Read it back with :func:`load_multiclass`.
        """
        from .storage import local_publishing

        with local_publishing(path, overwrite=overwrite) as tmp:
            tmp.mkdir()
            meta: dict[str, Any] = {
                "format": FORMAT, "format_version": FORMAT_VERSION,
                "library_version": _library_version(), "method": self.method,
                "n_classes": self.n_classes, "classes": self.classes, "params": self.params,
                "columns": self.columns, "n_rows": self.n_rows,
                "weight_total": self.weight_total, "dropped_rows": self.dropped_rows,
                "class_models": None, "tables": {}}
            if self._class_models is not None:
                entries: list[dict[str, object] | None] = []
                parts: list[Any] = []  # pyarrow Tables
                for k, m in enumerate(self._class_models):
                    if m is None:
                        entries.append(None)
                        continue
                    nb = 0 if m._blocks is None else len(m._blocks)
                    entries.append({"class": k, "params": m.params, "n_rows": m.n_rows,
                                    "weight_total": m.weight_total,
                                    "dropped_rows": m.dropped_rows, "columns": m.columns,
                                    "blocks": nb if m._blocks is not None else None})
                    if m._blocks is not None:
                        cols = {"class": pa.array(np.full(nb, k, dtype=np.int32))}
                        cols.update({f: pa.array(np.asarray(getattr(m._blocks, f),
                                                            dtype=np.float64))
                                     for f in _BLOCK_COLUMNS})
                        parts.append(pa.table(cols))
                meta["class_models"] = entries
                if parts:
                    table = pa.concat_tables(parts)
                    pq.write_table(table, tmp / _TABLE_FILE)
                    meta["tables"]["classes"] = {"file": _TABLE_FILE, "rows": table.num_rows,
                                                 "sha256": _sha256(tmp / _TABLE_FILE)}
            meta["checksum"] = _json_checksum(meta)
            with open(tmp / "model.json", "w") as fh:
                json.dump(meta, fh, indent=2, sort_keys=True, allow_nan=True)
                fh.write("\n")


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

def is_multiclass_model(path: str | os.PathLike) -> bool:
    """True when ``path`` is a directory whose model.json has format ``distcal-multiclass-model``.

    For ``distcal.load`` to dispatch: only the ``format`` field is read;
    nothing is validated (:func:`load_multiclass` does that). A model.json
    that cannot be read safely is left to the binary loader to report.
    """
    try:
        meta = read_model_json(Path(path))
    except ModelError:
        return False
    return meta.get("format") == FORMAT


def load_multiclass(path: str | os.PathLike) -> MulticlassCalibrationModel:
    """Read a directory written by :meth:`MulticlassCalibrationModel.save`.

    The directory is untrusted input. Raises :class:`~distcal.ModelError`
    when it is missing, not a distcal multiclass model, of an unknown format
    version, or damaged (a checksum, a table or the metadata is
    inconsistent); only the regular file ``classes.parquet`` directly inside
    it is read, and every class model is checked as a binary one.

    Examples
    --------
    >>> import tempfile, pandas as pd
    >>> df = pd.DataFrame({"s": [[.7, .2, .1], [.2, .5, .3], [.1, .2, .7], [.3, .4, .3]],
    ...                    "y": [0, 1, 2, 1]})
    >>> model = fit_multiclass(df, method="isotonic", score_col="s", label_col="y")
    >>> with tempfile.TemporaryDirectory() as d:
    ...     model.save(d + "/m")
    ...     load_multiclass(d + "/m") == model
    True
    """
    root = Path(path)
    meta = read_checked_meta(root, FORMAT, FORMAT_VERSION, "multiclass ")
    return build_or_damaged(root, lambda: _model_from_meta(root, meta))


def _model_from_meta(root: Path, meta: dict[str, Any]) -> MulticlassCalibrationModel:
    def bad(why: str) -> ModelError:
        return ModelError(f"'{root}' is damaged: {why}")

    method, k = meta["method"], meta["n_classes"]
    if method not in METHODS:
        raise bad(f"unknown method {str(method)[:40]!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= 1_000_000:
        raise bad(f"n_classes must be an integer >= 2, got {str(k)[:40]!r}")
    if meta["classes"] != list(range(k)):
        raise bad("classes are not 0..K-1")
    if not isinstance(meta["params"], dict):
        raise bad("params is not a mapping")
    entries = meta["class_models"]
    tables = meta["tables"]
    if not isinstance(tables, dict):
        raise bad("tables is not a mapping")
    if method == "temperature":
        beta = meta["params"].get("beta")
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) \
                or not (np.isfinite(beta) and beta > 0):
            raise bad(f"beta must be finite and > 0, got {str(beta)[:40]!r}")
        if entries is not None or tables:
            raise bad("a temperature-scaling model has no per-class models or tables")
        return MulticlassCalibrationModel(method, k, meta["params"], None,
                                          n_rows=meta["n_rows"],
                                          weight_total=meta["weight_total"],
                                          dropped_rows=meta["dropped_rows"],
                                          columns=meta["columns"])
    if not isinstance(entries, list) or len(entries) != k:
        raise bad(f"expected {k} per-class entries")
    table = None
    if "classes" in tables:
        table = read_table_file(root, tables["classes"], _TABLE_FILE)
        if set(table.schema.names) != {"class", *_BLOCK_COLUMNS}:
            raise ModelError(f"'{root / _TABLE_FILE}' does not hold the expected per-class "
                             "blocks")
    if set(tables) - {"classes"}:
        raise bad(f"unknown tables {sorted(map(str, tables))[:5]}")
    cls = None if table is None else table.column("class").to_numpy()
    used = 0
    models: list[CalibrationModel | None] = []
    for i, e in enumerate(entries):
        if e is None:
            if not (k == 2 and i == 0):
                raise bad(f"class {i} has no model")
            models.append(None)
            continue
        if not isinstance(e, dict):
            raise bad(f"entry {i} is not a mapping")
        if e["class"] != i:
            raise bad(f"entry {i} is for class {str(e['class'])[:40]!r}")
        blocks = None
        if e["blocks"] is not None:
            if cls is None or table is None:
                raise bad(f"class {i} has blocks but there is no blocks table")
            rows = np.flatnonzero(cls == i)
            if len(rows) != e["blocks"]:
                raise bad(f"class {i} has {len(rows)} blocks in the table, "
                          f"{str(e['blocks'])[:40]} in model.json")
            blocks = blocks_from_table(table.take(pa.array(rows)),
                                       f"'{root / _TABLE_FILE}' (class {i})", keys=("class",))
            used += len(rows)
        parts = {f: e[f] for f in ("n_rows", "weight_total", "dropped_rows", "columns")}
        try:
            check_model(method, e["params"], blocks, **parts)
        except ValueError as exc:
            raise bad(f"class {i}: {exc}") from exc
        models.append(CalibrationModel(method, e["params"], blocks, **parts))
    if table is not None and used != table.num_rows:
        raise bad("the blocks table has rows of no class")
    for f in ("n_rows", "dropped_rows"):
        if isinstance(meta[f], bool) or not isinstance(meta[f], int) or meta[f] < 0:
            raise bad(f"{f} must be an integer >= 0")
    return MulticlassCalibrationModel(method, k, meta["params"], models, n_rows=meta["n_rows"],
                                      weight_total=meta["weight_total"],
                                      dropped_rows=meta["dropped_rows"], columns=meta["columns"])


# ---------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------

def fit_multiclass(data: Any, method: str = "isotonic", score_col: str | None = None,
                   score_cols: list[str] | None = None, label_col: str = "label",
                   weight_col: str | None = None, on_invalid: str = "raise",
                   **method_params: Any) -> MulticlassCalibrationModel:
    """Fit a multiclass calibration map on local data.

    Parameters
    ----------
    data : pandas DataFrame, pyarrow Table or Parquet path
    method : {"isotonic", "sigmoid", "histogram", "temperature"}
        One-vs-rest with the binary method, or temperature scaling.
    score_col : str, optional
        A vector column: K per-class scores per row (numpy arrays or lists;
        pyarrow list or fixed-size list).
    score_cols : list of str, optional
        One column per class, in class order. Exactly one of ``score_col``
        and ``score_cols``. One score per row (a single column, or vectors
        of length 1) is binary: K = 2, the score of class 1.
    label_col : str
        The class index 0..K-1 of each row (whole numbers).
    weight_col : str, optional
        Row weights (finite, >= 0; rows of weight 0 take no part).
    on_invalid : {"raise", "drop"}
        Bad rows (labels outside 0..K-1, fractional or NaN labels; null,
        NaN or ragged scores; infinite scores except for isotonic; bad
        weights) raise :class:`~distcal.DataError` naming the column, the
        problem and the count, or are dropped (``model.dropped_rows``).
    **method_params
        Passed to :func:`distcal.fit` for every class (e.g.
        ``interpolation="step"`` for isotonic, ``n_bins`` for histogram);
        temperature scaling takes none.

    Returns
    -------
    MulticlassCalibrationModel

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"s": [[.7, .2, .1], [.2, .5, .3], [.1, .2, .7], [.5, .4, .1]],
    ...                    "y": [0, 1, 2, 1]})
    >>> model = fit_multiclass(df, method="isotonic", score_col="s", label_col="y")
    >>> model.predict([[.7, .2, .1]]).round(3).tolist()
    [[1.0, 0.0, 0.0]]
    >>> model.class_model(1).method
    'isotonic'
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "temperature" and method_params:
        raise TypeError(f"unknown parameter(s) for method 'temperature': "
                        f"{sorted(method_params)}")
    scores, labels, weights, k, dropped, score_cols = read_fit_input(
        data, method, score_col, score_cols, label_col, weight_col, on_invalid)
    columns = {"score": score_col, "scores": score_cols, "label": label_col,
               "weight": weight_col}
    wsum = float(labels.shape[0] if weights is None else weights.sum())
    if method == "temperature":
        logits = to_logits(scores)
        kind = "logits" if logits is scores or scores.shape[1] == 1 else "probabilities"
        zc = center_logits(logits)
        start = sample_start(zc, labels, weights)
        beta, info = fit_temperature(lambda b: _temperature_parts(zc, labels, weights, b),
                                     start=start)
        params = {"beta": beta, "temperature": 1.0 / beta, "input_": kind}
        return MulticlassCalibrationModel(method, k, params, None, n_rows=labels.shape[0],
                                          weight_total=wsum, dropped_rows=dropped,
                                          columns=columns)
    models = _fit_one_vs_rest(scores, labels, weights, k, method, method_params, score_col,
                              score_cols, label_col, weight_col, wsum)
    return MulticlassCalibrationModel(method, k, dict(method_params), models,
                                      n_rows=labels.shape[0], weight_total=wsum,
                                      dropped_rows=dropped, columns=columns)


def _fit_one_vs_rest(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None,
                     k: int, method: str, method_params: dict[str, Any],
                     score_col: str | None, score_cols: list[str] | None, label_col: str,
                     weight_col: str | None, wsum: float) -> list[CalibrationModel | None]:
    """Each class's binary model, fitted by :func:`distcal.fit`'s own code on its table.

    The table of class c is its scores against label == c over the valid
    rows (:func:`~distcal.core.multiclass.pool_one_vs_rest` for unit
    weights, the general pooling otherwise); the binary fit then runs over
    that one table as over the ordered ranges of a cluster engine, which
    gives the model ``distcal.fit`` gives on the class's rows.
    """
    import distcal  # distcal.fit's binary fit lives in distcal.api, above this module

    from . import params as checks
    from .engines.local import LocalEngine

    # As distcal.fit on the local engine: its options are accepted (and not
    # needed: the rows are in memory), anything else is a TypeError.
    given, _ = checks.split_engine_options("fit", method, method_params, LocalEngine.options)
    # The fit over ordered ranges that distcal.fit and the cluster engines'
    # one-vs-rest use (distcal.multiclass_engines gets it passed in).
    fit_binary: Callable[..., CalibrationModel] = distcal.api._fit_on_ranges
    checks.method_params(method, dict(given))  # bad values fail before any work
    rows = labels.shape[0]
    # The rows of each class, in row order (a stable sort of 16-bit keys is a radix sort).
    by_class = np.argsort(labels.astype(np.uint16) if k <= 1 << 16 else labels, kind="stable")
    bounds = np.searchsorted(labels[by_class], np.arange(k + 1))
    models: list[CalibrationModel | None] = []
    for c in range(k):
        if k == 2 and c == 0:
            models.append(None)
            continue
        j = scores.shape[1] - 1 if k == 2 else c
        name = (score_cols[j] if score_cols is not None else f"{score_col}[{j}]")
        column = scores[:, j]
        positive = by_class[bounds[c]:bounds[c + 1]]
        if weights is None:
            table = pool_one_vs_rest(column, positive)
        else:
            y = np.zeros(rows)
            y[positive] = 1.0
            table = pool_ties(np.ascontiguousarray(column), y, weights)
        cols = {"score": name, "label": label_col, "weight": weight_col}
        models.append(fit_binary(_ClassCounts(rows, wsum), _one_range(table), method,
                                 checks.method_params(method, dict(given)), cols))
    return models


class _ClassCounts:
    """What the binary fit reads from its ranges, for one class (one-vs-rest)."""

    def __init__(self, n_rows: int, weight_total: float):
        self.n_rows, self.weight_total, self.dropped_rows = n_rows, weight_total, 0

    def spearman_rows(self) -> bool:  # labels label == k are 0/1: never needed
        raise AssertionError("one-vs-rest labels are 0/1")


def _one_range(table: DistinctTable) -> Callable[[Callable[[DistinctTable], Any]], list[Any]]:
    """``map_ranges`` over a single ordered range: the whole table."""
    return lambda fn: [fn(table)]


def _temperature_parts(zc: np.ndarray, labels: np.ndarray, weights: np.ndarray | None,
                       beta: float, chunk: int = 1 << 16) -> list[np.ndarray]:
    """Per-chunk sums (the local 'partitions'; chunks keep temporaries in cache)."""
    n = zc.shape[0]
    return [temperature_sums(zc[i:i + chunk], labels[i:i + chunk],
                             None if weights is None else weights[i:i + chunk], beta,
                             centered=True)
            for i in range(0, n, chunk)]
