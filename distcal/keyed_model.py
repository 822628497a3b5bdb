"""One model for every variant: a calibration map per key, and how the maps combine.

A fit is a set of keyed problems (:mod:`distcal.core.keyed`); its model is
``{key -> map}`` plus a *combiner*, fixed by the variant:

* a binary score: the map of ``(GLOBAL, None)`` (such a fit returns the
  plain :class:`~distcal.CalibrationModel`, saved and loaded as this one
  key's model);
* one-vs-rest over K classes: the maps of ``(segment, k)``, each row's
  per-class probabilities divided by their sum (1/K where the sum is 0;
  with K = 2 only class 1 is calibrated and p0 = 1 - p1), as
  scikit-learn's ``CalibratedClassifierCV``;
* temperature scaling: one inverse temperature per segment,
  p = softmax(beta * logits) (:mod:`distcal.core.temperature`);
* segments: each row uses its segment's maps; a segment that fell back
  (less weight than ``min_segment_weight``), a segment not seen in fitting
  and a null key use the global maps. The type of the keys is part of
  the model (:func:`key_kind`): keys of another type are a
  :class:`~distcal.DataError`, not rows silently given the global maps;
  how many rows the global maps served is logged (INFO) and counted
  (:meth:`KeyedModel.global_rows`, ``.attrs["global_rows"]`` of a pandas
  ``transform``).

:class:`KeyedModel` is that model. Its views ``segment(key)`` and
``global_model`` are the model of one segment (a multiclass model, or the
binary :class:`~distcal.CalibrationModel`), ``class_model(k)`` the binary
map of one class. Saved as one directory (format ``distcal-keyed-model``,
version 2, :mod:`distcal.model_format`); :func:`distcal.load` reads it back.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import functools
import math
import os
import textwrap
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .core.keyed import GLOBAL, Key, factorize_keys, key_text
from .core.multiclass import normalise_ovr, to_logits
from .core.rows import group_by_code
from .core.temperature import softmax_predict
from .core.validate import as_scores
from .defaults import METHODS
from .errors import DataError, ModelError, column_not_found
from .logs import log
from .model import (
    CalibrationModel,
    MapRows,
    check_interval_columns,
    checked_map,
    damaged,
    is_count,
    is_number,
    nearly_equal,
    parse_model_json,
    read_table_file,
    steps_from_table,
)
from .model_format import (
    _BLOCK_COLUMNS,
    BLOCKS_FILE,
    MAPS_FILE,
    SEGMENTS_FILE,
    STEPS_FILE,
    write_model_dir,
)
from .storage import filesystem_for, publish_dir

__all__ = ["KeyedModel", "MulticlassCalibrationModel", "SegmentedCalibrationModel",
           "TemperatureMap", "keyed_from_meta", "class_columns", "key_kind"]


@dataclass(frozen=True)
class TemperatureMap:
    """p = softmax(beta * logits) (:mod:`distcal.core.temperature`).

    ``input_``: how the fit read its scores ("logits" or "probabilities",
    scikit-learn's rule over all the rows fitted). Predictions read scores
    the same way, so a row's probabilities depend on that row only, not on
    the batch or partition it comes in (scikit-learn decides again for
    each array given to ``predict_proba``: the same for an array like the
    fitted rows, a NaN row or a row of logits among probabilities aside).
    """

    beta: float
    input_: str = "logits"
    n_rows: int = 0
    weight_total: float = 0.0

    @property
    def params(self) -> dict[str, Any]:
        return {"beta": self.beta, "temperature": 1.0 / self.beta, "input_": self.input_}

    def predict(self, scores: np.ndarray) -> np.ndarray:
        return softmax_predict(to_logits(scores, self.input_), self.beta)


class KeyedModel:
    """Calibration maps per key and their combiner (see the module docstring).

    Attributes
    ----------
    method : str
    by : list of str
        The segment columns (empty without segments).
    n_classes : int
        K for multiclass scores, 0 for a binary score.
    params : dict
        The method's parameters; the global temperature map's ``beta``,
        ``temperature`` and ``input_`` for temperature scaling.
    segments : pandas.DataFrame
        One row per segment seen in fitting: the ``by`` columns,
        ``n_rows``, ``weight``, ``fallback`` (``by`` only).
    n_rows, weight_total, dropped_rows, columns
        Of the rows fitted (all segments).

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .2, .4, .6, .8],
    ...                    "label": [0, 1, 0, 1, 1, 0, 1, 1],
    ...                    "market": ["fr"] * 4 + ["de"] * 4})
    >>> model = distcal.fit(df, by="market")
    >>> model.segments
      market  n_rows  weight  fallback
    0     de       4     4.0     False
    1     fr       4     4.0     False
    >>> model.predict([0.5, 0.5, 0.5], segments=["fr", "de", "it"])
    array([0.5 , 0.75, 0.5 ])
    """

    def __init__(self, method: str, maps: dict[Key, Any], *, by: list[str] | None = None,
                 n_classes: int = 0, params: dict[str, Any] | None = None,
                 segments: pd.DataFrame | None = None, min_segment_weight: float = 0.0,
                 n_rows: int = 0, weight_total: float = 0.0, dropped_rows: int = 0,
                 columns: dict[str, Any] | None = None):
        self.method = method
        self.by = list(by or [])
        self.n_classes = int(n_classes)
        self._maps = dict(maps)
        self._params = dict(params or {})
        if segments is None:
            segments = pd.DataFrame({**{b: [] for b in self.by}, "n_rows": [], "weight": [],
                                     "fallback": []})
        self._segments = segments.reset_index(drop=True)
        self.min_segment_weight = float(min_segment_weight)
        self.n_rows, self.weight_total = int(n_rows), float(weight_total)
        self.dropped_rows = int(dropped_rows)
        self.columns = dict(columns or {})
        self._check()

    def _check(self) -> None:
        classes = self._classes_keyed()
        if self.method == "temperature":
            if self.n_classes < 2:
                raise ValueError("temperature scaling needs K >= 2 classes")
        elif self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}")
        for cls in classes:
            if (GLOBAL, cls) not in self._maps:
                raise ValueError(f"the model has no global map for {key_text([], (GLOBAL, cls))}")
        # Every fitted segment has one map per class, no more (a segment without
        # one of them would fail to predict, or fall back to the global map unseen).
        found: dict[Any, set[int | None]] = {}
        for segment, cls in self._maps:
            found.setdefault(segment, set()).add(cls)
        for segment, have in found.items():
            if have != set(classes):
                text = "all rows" if segment is GLOBAL else key_text(self.by, (segment, None))
                wanted = "one map of no class" if classes == [None] else f"classes {classes}"
                raise ValueError(f"the maps of {text} are for classes {sorted(have, key=str)}; "
                                 f"every segment of this model has {wanted}")

    def _classes_keyed(self) -> list[int | None]:
        """The class part of this model's keys."""
        if self.n_classes < 2 or self.method == "temperature":
            return [None]
        return [1] if self.n_classes == 2 else list(range(self.n_classes))

    # -- attributes -----------------------------------------------------
    @property
    def params(self) -> dict[str, Any]:
        if self.method == "temperature" or self.n_classes < 2:  # the global map's, fitted
            return {**self._params, **self._maps[(GLOBAL, None)].params}
        return dict(self._params)

    @property
    def classes(self) -> list[int]:
        """The class indices ``[0, ..., K-1]`` (multiclass only)."""
        if self.n_classes < 2:
            raise AttributeError("a model of a binary score has no classes")
        return list(range(self.n_classes))

    @property
    def beta(self) -> float:
        """The global inverse temperature (temperature scaling only)."""
        if self.method != "temperature":
            raise AttributeError(f"a {self.method} (one-vs-rest) model has no beta")
        return float(self._maps[(GLOBAL, None)].beta)

    @property
    def segments(self) -> pd.DataFrame:
        """One row per segment seen in fitting: the ``by`` columns, n_rows, weight, fallback."""
        if not self.by:
            raise AttributeError("a model fitted without by= has no segments")
        return self._segments.copy()

    def _segment_keys(self) -> list[tuple[Any, ...]]:
        return list(self._segments[self.by].itertuples(index=False, name=None)) \
            if self.by else []

    def _view(self, segment: Any) -> Any:
        """The model of one segment's maps (or the global ones)."""
        classes = self._classes_keyed()
        maps = {(GLOBAL, c): self._maps[(segment, c)] for c in classes}
        if self.n_classes < 2:
            binary = maps[(GLOBAL, None)]
            if segment is GLOBAL and binary.dropped_rows != self.dropped_rows:
                binary = copy.copy(binary)  # the rows dropped are the fit's, as multiclass
                binary.dropped_rows = self.dropped_rows
            return binary
        first = maps[(GLOBAL, classes[0])]
        return KeyedModel(self.method, maps, n_classes=self.n_classes, params=self._params,
                          n_rows=first.n_rows, weight_total=first.weight_total,
                          dropped_rows=self.dropped_rows if segment is GLOBAL else 0,
                          columns=self.columns)

    @property
    def global_model(self) -> Any:
        """The model of all rows (``by`` only): multiclass, or a CalibrationModel."""
        if not self.by:
            raise AttributeError("a model fitted without by= has no global_model; it is one")
        return self._view(GLOBAL)

    def _key(self, key: Any) -> tuple[Any, ...]:
        """``key`` as a tuple of values of the model's key types: a key of another type is
        not a fitted one, a ``KeyError`` (True where the keys are numbers, which a dict
        would take for 1, too)."""
        if len(self.by) == 1 and not isinstance(key, tuple):
            key = (key,)
        try:
            hash(key)
            fits = isinstance(key, tuple) and len(key) == len(self.by)
        except TypeError:  # (a list or an array among the values: no dict key)
            fits = False
        if not fits:
            raise KeyError(f"a segment key is a tuple of {len(self.by)} values "
                           f"({', '.join(self.by)}), got {key!r}")
        try:
            self.check_key_types([key])
        except DataError as exc:
            raise KeyError(str(exc)) from None
        return key

    def segment(self, key: Any) -> Any:
        """The model of one segment (the global one for a segment that falls back).

        ``key`` is a value, or a tuple of values for several ``by`` columns.
        A key not seen in fitting is a ``KeyError``.
        """
        if not self.by:
            raise AttributeError("a model fitted without by= has no segments")
        k = self._key(key)
        if (k, self._classes_keyed()[0]) in self._maps:  # a fitted segment (a dict look-up:
            return self._view(k)                      # the set below costs O(segments))
        if k not in set(self._segment_keys()):
            raise KeyError(f"no segment {key_text(self.by, (k, None))} in this model "
                           f"({len(self._segments)} segments)")
        return self._view(GLOBAL)

    def class_model(self, k: int) -> CalibrationModel:
        """The binary :class:`~distcal.CalibrationModel` of class ``k`` (one-vs-rest).

        With K = 2 only class 1 has one (p0 = 1 - p1). Temperature scaling
        has no per-class models (one beta for all classes): ValueError.
        """
        if self.n_classes < 2:
            raise AttributeError("a model of a binary score has no classes")
        if self.method == "temperature":
            raise ValueError("a temperature-scaling model has no per-class models: one "
                             f"inverse temperature for all classes (beta = {self.beta:.6g})")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) \
                or not 0 <= k < self.n_classes:
            raise ValueError(f"class must be one of {self.classes}, got {k!r}")
        if self.n_classes == 2 and k == 0:
            raise ValueError("with K = 2 only class 1 is calibrated (as scikit-learn does); "
                             "p0 = 1 - p1: use class_model(1)")
        m: CalibrationModel = self._maps[(GLOBAL, int(k))]
        return m

    # -- prediction -----------------------------------------------------
    def _predict_maps(self, segment: Any, s: np.ndarray) -> np.ndarray:
        """The combined prediction of one segment's maps for scores ``s``."""
        if self.method == "temperature":
            out: np.ndarray = self._maps[(segment, None)].predict(s)
            return out
        if self.n_classes < 2:
            out = self._maps[(segment, None)].predict(s)
            return out
        q = np.zeros((s.shape[0], self.n_classes))
        if self.n_classes == 2:
            q[:, 1] = self._maps[(segment, 1)].predict(s[:, -1])
        else:
            for k in range(self.n_classes):
                q[:, k] = self._maps[(segment, k)].predict(np.ascontiguousarray(s[:, k]))
        return normalise_ovr(q)

    def _scores(self, scores: Any) -> np.ndarray:
        s = as_scores(scores)  # real numbers only (no complex, dates, durations)
        if self.n_classes < 2:
            if s.ndim != 1:
                raise DataError(f"scores must be a 1-d array of a binary score, got shape "
                                f"{s.shape}")
            return s
        if s.ndim == 1 and self.n_classes == 2:
            s = s.reshape(-1, 1)
        if s.ndim != 2:
            raise DataError(f"scores must be a 2-d array (n, {self.n_classes}), got shape "
                            f"{s.shape}")
        if s.shape[1] != self.n_classes and not (self.n_classes == 2 and s.shape[1] == 1):
            raise DataError(f"scores have {s.shape[1]} columns; the model has K = "
                            f"{self.n_classes} classes")
        return s

    def predict(self, scores: Any, segments: Any = None) -> np.ndarray:
        """Calibrated probabilities: (n,) for a binary score, (n, K) rows summing to 1.

        ``scores``: (n,) or (n, K) per-class scores (K = 2: also the score of
        class 1). ``segments`` (``by`` only): one key per score (values for
        one ``by`` column; tuples, a 2-D array or a DataFrame with the ``by``
        columns for several); null keys, keys not seen in fitting and
        segments that fall back get the global maps. A NaN score gives NaN.
        """
        s = self._scores(scores)
        if not self.by:
            if segments is not None:
                raise TypeError("segments= is for a model fitted with by=")
            return self._predict_maps(GLOBAL, s)
        if segments is None:
            raise TypeError(f"a model fitted by {self.by} needs each score's segment: "
                            "predict(scores, segments=keys); model.global_model.predict(scores) "
                            "applies the global map")
        return self._predict_segments(s, segments, None)

    def predict_interval(self, scores: Any, segments: Any = None
                         ) -> tuple[np.ndarray, np.ndarray]:
        """The Venn-Abers interval (p0, p1) of each score, by its segment's map (a binary
        Venn-Abers model with ``by``; null, unseen and fallen-back keys: the global map).

        ``scores``: (n,) binary scores. ``segments``: one key per score, as
        for :meth:`predict` (needed with ``by``, a ``TypeError`` without).
        Returns two (n,) arrays, p0 and p1. Other models: ``AttributeError``.
        """
        if self.method != "venn_abers" or self.n_classes >= 2:
            raise AttributeError("predict_interval is for a Venn-Abers model of a binary "
                                 "score (multiclass: model.class_model(k).predict_interval)")
        s = self._scores(scores)
        if not self.by:
            if segments is not None:
                raise TypeError("segments= is for a model fitted with by=")
            out: tuple[np.ndarray, np.ndarray] = \
                self._maps[(GLOBAL, None)].predict_interval(s)
            return out
        if segments is None:
            raise TypeError(f"a model fitted by {self.by} needs each score's segment")
        both = self._predict_segments(s, segments, None, interval=True)
        return both[:, 0].copy(), both[:, 1].copy()

    def _predict_segments(self, s: np.ndarray, segments: Any, counts: dict[str, int] | None,
                          interval: bool = False) -> np.ndarray:
        """:meth:`predict` with segments; adds the rows served by the global maps to
        ``counts`` (:meth:`global_rows`' keys) when given. ``interval``: the columns
        p0, p1 of :meth:`predict_interval` instead."""
        codes, keys = self.key_codes(segments, s.shape[0])
        self.check_key_types(keys, codes)
        if counts is not None:
            for reason, k in self._global_counts(codes, keys).items():
                counts[reason] = counts.get(reason, 0) + k
        width = 2 if interval else self.n_classes
        out = np.empty((s.shape[0], width) if width >= 2 else s.shape[0])
        first = self._classes_keyed()[0]
        fitted = [k if (k, first) in self._maps else GLOBAL for k in keys]
        null_rows, rows = group_by_code(codes, len(keys))
        groups: dict[Any, list[np.ndarray]] = {GLOBAL: [null_rows]}
        for seg, idx in zip(fitted, rows):
            groups.setdefault(seg, []).append(idx)
        for seg, parts in groups.items():
            idx = np.concatenate(parts)
            if idx.shape[0]:
                out[idx] = np.column_stack(self._maps[(seg, None)].predict_interval(s[idx])) \
                    if interval else self._predict_maps(seg, s[idx])
        return out

    # -- segment keys: their types, and the rows the global maps serve ----------
    @functools.cached_property
    def _model_kinds(self) -> list[set[str]]:
        """Per ``by`` column, the kinds (:func:`key_kind`) of the fitted segments' keys
        (once: :meth:`segment` checks each key it is given)."""
        return [{k for k in map(key_kind, self._segments[b].tolist()) if k is not None}
                for b in self.by]

    def check_key_types(self, keys: list[tuple[Any, ...]], codes: np.ndarray | None = None
                        ) -> None:
        """Refuse keys whose type is not the type of the model's keys (:func:`key_kind`).

        ``keys``: distinct key tuples of the rows (``codes``: each row's
        index in ``keys``, -1 for null; to count the rows in the message).
        A :class:`~distcal.DataError` naming the column, both types and the
        rows, e.g. ``column 'g' (segment): 300 rows hold strings; the
        model's keys of 'g' are numbers``.
        """
        for j, (b, want) in enumerate(zip(self.by, self._model_kinds)):
            if not want:
                continue
            bad = [i for i, k in enumerate(keys) if key_kind(k[j]) not in (None, *want)]
            if not bad:
                continue
            got = sorted({str(key_kind(keys[i][j])) for i in bad})
            n = None if codes is None else int(np.isin(codes, np.asarray(bad)).sum())
            rows = "" if n is None else f"{n} row{' holds' if n == 1 else 's hold'} "
            raise DataError(
                f"column '{b}' (segment): {rows or 'keys are '}{_kinds_text(got)}; the model's "
                f"keys of '{b}' are {_kinds_text(sorted(want))}, so no row would match a "
                "fitted segment; cast the column to the model's type")

    def check_column_types(self, types: dict[str, Any]) -> None:
        """:meth:`check_key_types` from the declared types of the ``by`` columns (pandas,
        Arrow or Spark types, by column name), before any row is read; a type that does
        not fix the kind (pandas' object) is left to the values. For an engine that
        applies the model without :meth:`predict` (Spark's segmented transform)."""
        for b, want in zip(self.by, self._model_kinds):
            got = type_kind(types[b]) if b in types else None
            if got is not None and want and got not in want:
                raise DataError(
                    f"column '{b}' (segment) has type {_type_name(types[b])}, which holds "
                    f"{_kinds_text([got])}; the model's keys of '{b}' are "
                    f"{_kinds_text(sorted(want))}, so no row would match a fitted segment; "
                    "cast the column to the model's type")

    def _global_counts(self, codes: np.ndarray, keys: list[tuple[Any, ...]]) -> dict[str, int]:
        """Rows served by the global maps, by reason (:meth:`global_rows`)."""
        valid = codes >= 0
        per_key = np.bincount(codes[valid], minlength=len(keys))
        seen = set(self._segment_keys())
        first = self._classes_keyed()[0]
        unseen = fallback = 0
        for key, n in zip(keys, per_key.tolist()):
            if key not in seen:
                unseen += int(n)
            elif (key, first) not in self._maps:
                fallback += int(n)
        return {"null_key": int(np.count_nonzero(~valid)), "unseen_key": unseen,
                "fallback_segment": fallback}

    def global_rows(self, data: Any) -> dict[str, int]:
        """How many rows of ``data`` the global maps serve, by reason, and in all.

        ``{"null_key": ..., "unseen_key": ..., "fallback_segment": ...,
        "total": ...}``: rows whose key is null (in any ``by`` column), rows
        whose key no fitted segment has, rows of segments that fall back
        (less weight than ``min_segment_weight``). ``data``: a pandas
        DataFrame, a pyarrow Table or a Parquet path (only the ``by``
        columns are read). Keys of another type than the model's are a
        :class:`~distcal.DataError`, as in :meth:`transform`, which logs
        these counts at INFO for local data (a pandas result also holds
        them in ``.attrs["global_rows"]``). Spark and Dask transforms are
        lazy: their rows are counted where they are predicted, on the
        workers, and not reported.
        """
        if not self.by:
            raise AttributeError("a model fitted without by= has no segments")
        keys = _local_keys(data, self.by)
        codes, distinct = factorize_keys([keys[b] for b in self.by], self.by)
        distinct = self._as_fitted_keys(distinct)
        self.check_key_types(distinct, codes)
        out = self._global_counts(codes, distinct)
        out["total"] = sum(out.values())
        return out

    def key_codes(self, segments: Any, n: int) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
        """Codes of the rows' segment keys (-1: null) and the key of each code."""
        if isinstance(segments, pd.DataFrame):
            for c in self.by:
                if c not in segments.columns:
                    raise column_not_found(c, "segment", map(str, segments.columns))
            cols = [segments[c] for c in self.by]
        elif len(self.by) == 1:
            if np.ndim(segments) == 0 and not isinstance(segments, tuple):
                segments = [segments]  # the key of one score
            values = segments.to_numpy() if isinstance(segments, (pd.Series, pd.Index)) \
                else segments
            if isinstance(values, np.ndarray) and values.ndim == 2 and values.shape[1] == 1:
                values = values[:, 0]  # one column of keys
            if not isinstance(values, np.ndarray):  # values, or 1-tuples as segment() takes
                values = [v[0] if isinstance(v, tuple) and len(v) == 1 else v for v in values]
            cols = [pd.Series(values, dtype=object if not isinstance(values, np.ndarray)
                              else None)]
        else:
            arr = np.empty((len(segments), len(self.by)), dtype=object)
            for i, row in enumerate(segments):
                if np.ndim(row) != 1 or len(row) != len(self.by):
                    raise DataError(f"each segment key needs {len(self.by)} values "
                                    f"({', '.join(self.by)}), got {row!r}")
                arr[i] = list(row)
            cols = [pd.Series(arr[:, j]) for j in range(len(self.by))]
        if any(len(c) != n for c in cols):
            raise DataError(f"segments has {len(cols[0])} keys for {n} scores")
        codes, keys = factorize_keys(cols, self.by)
        return codes, self._as_fitted_keys(keys)

    def _as_fitted_keys(self, keys: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """``keys`` as the fitted keys equal to them by value: numbers compare by value,
        decimals by their double (as Spark's join compares them); Decimal('0.1') is not
        Python-equal to 0.1, which left such rows to the global maps."""
        def as_double(key: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(float(v) if isinstance(v, decimal.Decimal) else v for v in key)

        fitted = self._segment_keys()
        if not any(isinstance(v, decimal.Decimal) for k in (*keys, *fitted) for v in k):
            return keys
        by_double = {as_double(k): k for k in fitted}
        return [by_double.get(as_double(k), k) for k in keys]

    def predict_part(self, part: pd.DataFrame | pa.Table, score_col: str | None,
                     score_cols: list[str] | None,
                     counts: dict[str, int] | None = None, interval: int | None = None
                     ) -> np.ndarray:
        """Predictions for one part of a frame holding the score and ``by`` columns
        (``counts``: as :meth:`_predict_segments`); ``interval`` 0 or 1: p0 or p1 of
        :meth:`predict_interval` instead."""
        from .core.rows import InvalidRowsError, Problems, read_scores

        n = len(part) if isinstance(part, pd.DataFrame) else part.num_rows
        names = list(map(str, part.columns)) if isinstance(part, pd.DataFrame) \
            else part.schema.names
        for c in [*(score_cols or [str(score_col)]), *self.by]:
            if c not in names:
                raise column_not_found(c, "segment" if c in self.by else "score", names)
        if n == 0:
            return np.zeros((0, self.n_classes) if self.n_classes >= 2 else 0)
        if self.n_classes >= 2:
            problems = Problems(n)
            # K >= 3: vectors of K scores, whatever this part holds (a part of null
            # vectors only gives NaN rows, as null vectors among others do).
            s = read_scores(part, score_col, score_cols, problems, finite=False,
                            length=self.n_classes if self.n_classes >= 3 else None)
            fatal = [(c, p, k) for c, p, k in problems.items
                     if k and ("ragged" in p or "text" in p)]
            if fatal:
                raise InvalidRowsError(fatal)
        else:
            from .core.rows import read_score

            s = read_score(part, str(score_col))
        if not self.by:
            return self.predict(s) if interval is None else self.predict_interval(s)[interval]
        keys = part[self.by] if isinstance(part, pd.DataFrame) else \
            part.select(self.by).to_pandas(integer_object_nulls=True, date_as_object=True)
        if interval is not None:
            both: np.ndarray = self._predict_segments(self._scores(s), keys, None, interval=True)
            return both[:, interval].copy()
        return self._predict_segments(self._scores(s), keys, counts)

    def score_inputs(self, score_col: str | None = None, score_cols: list[str] | None = None
                     ) -> tuple[str | None, list[str] | None]:
        """The columns a transform reads the scores from: ``score_col`` (numbers, or
        vectors for multiclass) or ``score_cols`` (one per class), exactly one not None.

        Neither given: the columns of the fit. A model fitted on one column of
        binary logits (temperature scaling: the pair (-s, s)) reads ``score_col``
        so too.
        """
        if score_col is None and score_cols is None:
            score_col, score_cols = self.columns.get("score"), self.columns.get("scores")
        elif score_cols is None and len(self.columns.get("scores") or ()) == 1:
            score_cols = [str(score_col)]
        if score_cols is not None:
            return None, [str(c) for c in score_cols]
        return score_col, None

    def transform(self, data: Any, score_col: str | None = None,
                  score_cols: list[str] | None = None,
                  output_col: str = "calibrated", *,
                  interval_cols: tuple[str, str] | None = None) -> Any:
        """``data`` with ``output_col`` = each row's calibrated probability (vector).

        Scores are read from ``score_col`` (a vector column for multiclass)
        or ``score_cols`` (one column per class); neither: the columns of
        the fit. The ``by`` columns are read from ``data``. pandas in,
        pandas out; pyarrow in, pyarrow out (``list<double>`` for vectors);
        a Parquet path in, pandas out; Spark and Dask frames are
        transformed by their engines, lazily.

        ``by`` keys of another type than the model's (:func:`key_kind`)
        are a :class:`~distcal.DataError`, raised where the rows are
        predicted (Dask: when computed; Spark's segmented transform: from
        the columns' types, before any job). ``interval_cols=("p0", "p1")``
        (a Venn-Abers model of a binary score) adds each row's interval
        (:meth:`predict_interval`, by its segment's map) as two more
        columns. For local data the rows the
        global maps serve (null keys, keys not seen in fitting, segments
        that fall back) are logged at INFO, and a pandas result holds
        their counts in ``.attrs["global_rows"]`` (:meth:`global_rows`).
        """
        from .engines import engine_of, get_engine

        check_interval_columns(self, interval_cols, output_col)
        score_col, score_cols = self.score_inputs(score_col, score_cols)
        inputs = {**dict.fromkeys(score_cols or [str(score_col)], "score"),
                  **dict.fromkeys(self.by, "segment")}

        counts: dict[str, int] = {}

        def predict(part: Any) -> np.ndarray:
            return self.predict_part(part, score_col, score_cols, counts)

        out = get_engine(engine_of(data)).transform_rows(data, inputs, output_col, predict,
                                                         vector=self.n_classes >= 2, model=self)
        for j, name in enumerate(interval_cols or ()):  # p0, p1: the workers' Python maps
            out = get_engine(engine_of(out)).transform_rows(
                out, inputs, name, partial(self.predict_part, score_col=score_col,
                                           score_cols=None, interval=j), vector=False)
        # Local data is transformed by now, every row counted here; Spark and Dask
        # frames are lazy (their rows are predicted on the workers, later).
        if self.by and isinstance(out, (pd.DataFrame, pa.Table)):
            counts = {r: counts.get(r, 0) for r in ("null_key", "unseen_key",
                                                    "fallback_segment")}
            counts["total"] = sum(counts.values())
            log.info("transform: %d of %d rows used the global map (%d null keys, %d keys "
                     "not seen in fitting, %d rows of segments that fall back)",
                     counts["total"], len(out), counts["null_key"], counts["unseen_key"],
                     counts["fallback_segment"])
            if isinstance(out, pd.DataFrame):
                out.attrs["global_rows"] = counts
        return out

    # -- inspection -----------------------------------------------------
    def describe(self) -> str:
        """A text summary: per segment (if any), per class (one line for temperature)."""
        def one(segment: Any) -> str:
            if self.method == "temperature":
                beta = self._maps[(segment, None)].beta
                return (f"p = softmax(beta * logits) over {self.n_classes} classes, "
                        f"beta = {beta:.6g} (temperature = {1.0 / beta:.6g})")
            if self.n_classes < 2:
                text: str = self._maps[(segment, None)].describe()
                return text
            out = []
            for k in range(self.n_classes):
                out.append(f"class {k}:")
                m = self._maps.get((segment, k))
                out.append(textwrap.indent("p0 = 1 - p1" if m is None else m.describe(), "  "))
            return "\n".join(out)

        if not self.by:
            return one(GLOBAL)
        parts = ["all rows:", textwrap.indent(one(GLOBAL), "  ")]
        first = self._classes_keyed()[0]
        for key in self._segment_keys():
            if (key, first) in self._maps:
                parts += [key_text(self.by, (key, None)) + ":", textwrap.indent(one(key), "  ")]
        return "\n".join(parts)

    def __repr__(self) -> str:
        kind = f"K={self.n_classes}" if self.n_classes >= 2 else "binary"
        seg = f", by={self.by}, segments={len(self._segments)}" if self.by else ""
        return (f"KeyedModel(method={self.method!r}, {kind}{seg}, n_rows={self.n_rows}, "
                f"weight_total={self.weight_total:g})")

    def __eq__(self, other: object) -> bool:
        """Equal settings, counts, segments and maps; floats to 1e-9 relative."""
        if not isinstance(other, KeyedModel):
            return NotImplemented
        if (self.method, self.by, self.n_classes, self.n_rows, self.dropped_rows,
                self.columns) != (other.method, other.by, other.n_classes, other.n_rows,
                                  other.dropped_rows, other.columns):
            return False
        if not (nearly_equal(self.params, other.params)
                and nearly_equal(self.weight_total, other.weight_total)):
            return False
        if set(self._maps) != set(other._maps):
            return False
        for key, m in self._maps.items():
            o = other._maps[key]
            if isinstance(m, TemperatureMap):
                if not (isinstance(o, TemperatureMap) and nearly_equal(m.beta, o.beta)):
                    return False
            elif m != o:
                return False
        if self.by:
            a, b = _by_keys(self._segments, self.by), _by_keys(other._segments, other.by)
            return bool(a[[*self.by, "n_rows", "fallback"]].astype(object).equals(
                b[[*self.by, "n_rows", "fallback"]].astype(object))
                and np.allclose(a["weight"], b["weight"], rtol=1e-9, atol=0))
        return True

    __hash__ = None  # type: ignore[assignment]

    # -- export (docs/export.md) ------------------------------------------
    def to_sql(self, score: Any = None, dialect: str = "spark",
               segments: Any = None) -> Any:
        """SQL expression(s) of the calibrated probabilities (:func:`distcal.export.to_sql`).

        ``score``: a SQL expression of the score (binary), or a list of K
        expressions, one per class (multiclass; default: the fit's
        ``score_cols``). Returns one string (binary) or a list of K strings,
        p_0 ... p_{K-1}. ``dialect``: "spark" (default), "duckdb",
        "postgres", "bigquery" or "snowflake", the SQL of ``score``,
        ``segments`` and the result. ``segments``: SQL expressions of the
        keys, in the order of ``by`` (default: the ``by`` column names);
        segments that fell back, unseen keys and null keys get the global map.
        """
        from .export.sql import quoted_column, to_sql

        if score is None:
            if self.n_classes >= 2 and not self.columns.get("scores"):
                raise ValueError(f"this model was fitted on the vector column "
                                 f"{self.columns.get('score')!r}: pass score= the SQL of "
                                 "its elements (K expressions; K = 2: the class-1 score), "
                                 "as the dialect reads an array's elements")
            names = self.columns.get("scores") or self.columns.get("score") or "score"
            # the fit's columns as the data names them (a dot, a space, a keyword)
            score = quoted_column(names, dialect) if isinstance(names, str) else \
                [quoted_column(str(c), dialect) for c in names]
        return to_sql(self, score, dialect, segments)

    def to_onnx(self) -> Any:
        """An ``onnx.ModelProto`` (input "score" [N] or [N, K], output "probability").

        Not for models fitted with ``by=`` (an ONNX graph has no key input):
        export ``segment(key)`` or ``global_model``.
        """
        from .export.onnx_graph import to_onnx

        return to_onnx(self)

    # -- persistence ----------------------------------------------------
    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the model directory (:mod:`distcal.model_format`).

        ``path`` is a local path or any fsspec URL; published atomically, as
        :meth:`CalibrationModel.save` (replaced only with ``overwrite=True``,
        once the new one is complete).
        """
        publish_dir(filesystem_for(os.fspath(path)), os.fspath(path), self.write_dir,
                    overwrite=overwrite)

    def write_dir(self, tmp: Path) -> None:
        """Write the model's files into the new local directory ``tmp``."""
        write_model_dir(tmp, self.method, self._maps, by=self.by, n_classes=self.n_classes,
                        params=self._params, columns=self.columns, n_rows=self.n_rows,
                        weight_total=self.weight_total, dropped_rows=self.dropped_rows,
                        min_segment_weight=self.min_segment_weight,
                        segments=self._segments if self.by else None)


def class_columns(columns: dict[str, Any], key: Key) -> dict[str, Any]:
    """The columns of one class's binary map (its own score column, or the vector's element)."""
    cls = key[1]
    if cls is None or "scores" not in columns:
        return columns
    names = columns["scores"]
    if names is not None:
        name = names[min(cls, len(names) - 1)]
    else:
        name = f"{columns['score']}[{cls}]"
    return {"score": name, "label": columns["label"], "weight": columns["weight"]}


# -- the type of a segment key --------------------------------------------------
# A key of another type never equals a fitted key (1 != "1", True is not the
# string "True"), so rows whose keys changed type (a CSV read as text, a cast
# upstream) would all silently take the global maps. Such keys are refused
# (DataError) rather than cast: "01", "1.0" and " 1" would each need a rule,
# and a cast that guesses is the silent wrong answer again. Integers and
# floats are one kind, compared by value as Python's == does (2.0 is the key
# 2, 2.5 matches no integer key): pandas holds an integer column with nulls as
# float64. Booleans are not numbers here (True == 1 in Python).
_KIND_TEXT = {"number": "numbers", "string": "strings", "bool": "booleans", "date": "dates",
              "timestamp": "timestamps without a time zone",
              "timestamp_tz": "timestamps with a time zone", "binary": "bytes"}


def key_kind(value: Any) -> str | None:
    """The kind of one segment key: "number", "string", "bool", "date", "timestamp" (naive),
    "timestamp_tz" (never equal to a naive one), "binary", another type's name, or None
    for a null (None, NaN, NaT)."""
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, float, np.integer, np.floating, decimal.Decimal)):
        return None if isinstance(value, (float, np.floating)) and math.isnan(value) \
            else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, datetime.datetime):
        return "timestamp" if value.tzinfo is None else "timestamp_tz"
    if isinstance(value, np.datetime64):
        return "timestamp"
    if isinstance(value, datetime.date):
        return "date"
    if isinstance(value, (bytes, bytearray)):
        return "binary"
    return type(value).__name__


def type_kind(dtype: Any) -> str | None:
    """The kind of the keys a column of type ``dtype`` holds (a pyarrow, numpy/pandas or
    Spark type), or None when the type does not fix it (pandas' object, null)."""
    if isinstance(dtype, pa.DataType):
        t = pa.types
        if t.is_dictionary(dtype):
            return type_kind(dtype.value_type)
        return ("bool" if t.is_boolean(dtype) else
                "number" if t.is_integer(dtype) or t.is_floating(dtype) or t.is_decimal(dtype)
                else "string" if t.is_string(dtype) or t.is_large_string(dtype)
                else "date" if t.is_date(dtype)
                else ("timestamp" if dtype.tz is None else "timestamp_tz")
                if t.is_timestamp(dtype)
                else "binary" if t.is_binary(dtype) or t.is_large_binary(dtype)
                else None if t.is_null(dtype) else str(dtype))
    name = getattr(dtype, "typeName", None)
    if callable(name) and type(dtype).__module__.startswith("pyspark."):
        # Spark's TIMESTAMP keys are its session's wall-clock times, as toPandas() gives
        # them (naive): the Spark engine reads them as timestamp_ntz.
        spark = {"boolean": "bool", "byte": "number", "short": "number", "integer": "number",
                 "long": "number", "float": "number", "double": "number", "decimal": "number",
                 "string": "string", "varchar": "string", "char": "string", "date": "date",
                 "timestamp": "timestamp", "timestamp_ntz": "timestamp", "binary": "binary",
                 "null": None}
        return spark.get(name(), name())
    try:
        dt = pd.api.types.pandas_dtype(dtype)
    except TypeError:
        return None
    if pd.api.types.is_bool_dtype(dt):
        return "bool"
    if pd.api.types.is_numeric_dtype(dt):
        return "number"
    if pd.api.types.is_datetime64_any_dtype(dt):
        return "timestamp_tz" if isinstance(dt, pd.DatetimeTZDtype) else "timestamp"
    if pd.api.types.is_string_dtype(dt) and dt != np.dtype(object):
        return "string"
    return None  # object, category: the values tell


def _kinds_text(kinds: list[str]) -> str:
    return " and ".join(_KIND_TEXT.get(k, f"values of type {k}") for k in kinds)


def _type_name(dtype: Any) -> str:
    simple = getattr(dtype, "simpleString", None)
    return str(simple()) if callable(simple) else str(dtype)


def _local_keys(data: Any, by: list[str]) -> pd.DataFrame:
    """The ``by`` columns of local data (pandas, Arrow, a Parquet path) as pandas."""
    from .tables import is_path, open_dataset, read_all

    if is_path(data):
        data = open_dataset(data)
    elif isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif not isinstance(data, (pd.DataFrame, pa.Table)):
        raise TypeError(f"cannot read data of type {type(data).__name__}")
    names = data.columns if isinstance(data, pd.DataFrame) else data.schema.names
    for b in by:
        if b not in names:
            raise column_not_found(b, "segment", map(str, names))
    if isinstance(data, pd.DataFrame):
        return data[by]
    table = data.select(by) if isinstance(data, pa.Table) else read_all(data, by)
    return table.to_pandas(integer_object_nulls=True, date_as_object=True)


# The names of distcal 0.1's multiclass and segmented models: one class now.
MulticlassCalibrationModel = KeyedModel
SegmentedCalibrationModel = KeyedModel


# -- loading (untrusted input) -----------------------------------------------------

def keyed_from_meta(root: Path, meta: dict[str, Any]) -> KeyedModel | CalibrationModel:
    """The model of a directory of format version 2 (:mod:`distcal.model_format`), its
    checksummed metadata read: every map (:func:`~distcal.model.check_model`), unique keys,
    block counts and the segments table checked.

    The model of a binary score without ``by`` (the one key, no segment and
    no class) is the :class:`~distcal.CalibrationModel` that saved it; any
    other is a :class:`KeyedModel`.
    """
    bad = partial(damaged, root)
    method, by, k = meta["method"], meta["by"], meta["n_classes"]
    if method not in (*METHODS, "temperature"):
        raise bad(f"unknown method {str(method)[:40]!r}")
    if not (isinstance(by, list) and all(isinstance(b, str) for b in by)
            and len(set(by)) == len(by)):
        raise bad("by must be a list of distinct column names")
    if isinstance(k, bool) or not isinstance(k, int) or not (k == 0 or 2 <= k <= 1_000_000):
        raise bad("n_classes must be 0 or an integer >= 2")
    binary = not by and k == 0
    tables = meta["tables"]
    if not isinstance(tables, dict) or set(tables) - {"maps", "blocks", "segments", "steps"} \
            or "maps" not in tables:
        raise bad("unexpected tables in model.json")
    maps_t = read_table_file(root, tables["maps"], MAPS_FILE)
    if set(maps_t.schema.names) != {*by, "class", "n_rows", "weight", "params", "blocks"}:
        raise ModelError(f"'{root / MAPS_FILE}' does not hold the expected columns")
    blocks_t = read_table_file(root, tables["blocks"], BLOCKS_FILE) if "blocks" in tables \
        else None
    if blocks_t is not None and set(blocks_t.schema.names) != {"map", *_BLOCK_COLUMNS,
                                                               "score_mean"}:
        raise ModelError(f"'{root / BLOCKS_FILE}' does not hold the expected blocks")
    steps_t = read_table_file(root, tables["steps"], STEPS_FILE) if "steps" in tables \
        else None
    if steps_t is not None and set(steps_t.schema.names) != {"map", "kind", "score", "prob"}:
        raise ModelError(f"'{root / STEPS_FILE}' does not hold the expected steps")
    step_rows = MapRows(root, steps_t, STEPS_FILE, "map")
    block_rows = MapRows(root, blocks_t, BLOCKS_FILE, "map")
    columns = meta["columns"]
    maps: dict[Key, Any] = {}
    seg_values = [maps_t.column(b).to_pylist() for b in by]
    classes = maps_t.column("class").to_pylist()
    for i in range(maps_t.num_rows):
        values: Any = tuple(col[i] for col in seg_values)
        segment: Any
        if by and all(v is None for v in values):
            segment = GLOBAL
        elif any(v is None for v in values):
            raise bad(f"map {i} has a partly null segment key")
        else:
            segment = values if by else GLOBAL
        key = (segment, classes[i])
        if key in maps:
            raise bad(f"the key {key_text(by, key)} appears twice")
        where = key_text(by, key)
        params = parse_model_json(maps_t.column("params")[i].as_py(), root / MAPS_FILE,
                                  f"params of {where}: ")
        n_rows, weight = maps_t.column("n_rows")[i].as_py(), maps_t.column("weight")[i].as_py()
        nb = maps_t.column("blocks")[i].as_py()
        if method == "temperature":
            beta = params.get("beta") if isinstance(params, dict) else None
            if isinstance(beta, bool) or not isinstance(beta, (int, float)) \
                    or not (math.isfinite(beta) and beta > 0) or nb != -1 \
                    or params.get("input_") not in ("logits", "probabilities"):
                raise bad(f"{where}: not a temperature map")
            if not (is_count(n_rows) and is_number(weight) and weight >= 0):
                raise bad(f"{where}: n_rows and weight must be numbers >= 0")
            maps[key] = TemperatureMap(float(beta), params["input_"], int(n_rows),
                                       float(weight))
            continue
        blocks = block_rows.blocks(i, nb, where, means=method == "isotonic")
        steps = None
        if method == "venn_abers":
            part = step_rows.take(i)
            if part is None or part.num_rows == 0:
                raise bad(f"{where} has no Venn-Abers steps")
            steps = steps_from_table(part, f"'{root / STEPS_FILE}' ({where})", keys=("map",))
        # A binary model's map is the model: it keeps the rows its fit dropped.
        maps[key] = checked_map(root, where, method, params, blocks,
                                columns=class_columns(columns, key), steps=steps,
                                n_rows=n_rows, weight_total=weight,
                                dropped_rows=meta["dropped_rows"] if binary else 0)
    if block_rows.taken != block_rows.total:
        raise bad("the blocks table has blocks of no map")
    if step_rows.taken != step_rows.total:
        raise bad("the steps table has steps of no map")
    segments = None
    if by:
        seg_t = read_table_file(root, tables.get("segments"), SEGMENTS_FILE)
        info = meta["segments"]
        if set(seg_t.schema.names) != set(by) or not isinstance(info, dict):
            raise bad("the segments table does not hold the by columns")
        segments = pd.DataFrame({b: seg_t.column(b).to_pylist() for b in by})
        seg_keys = list(segments.itertuples(index=False, name=None))
        if len(set(seg_keys)) != len(seg_keys):
            raise bad("a segment key appears twice")
        if any(v is None for k in seg_keys for v in k):
            raise bad("a segment has a null key")
        for f, dtype, ok in (("n_rows", np.int64, is_count),
                             ("weight", np.float64, lambda v: is_number(v) and v >= 0),
                             ("fallback", bool, lambda v: isinstance(v, bool))):
            values = info.get(f)
            if not isinstance(values, list) or len(values) != len(segments) or \
                    not all(map(ok, values)):
                raise bad(f"segments.{f} does not match the segments table (one value of "
                          "the right type a segment)")
            segments[f] = np.asarray(values, dtype=dtype)
        # The key types are part of the model: the segments table and the maps must
        # name the same segments with keys of the same kind (1 is not "1").
        def typed(key: tuple[Any, ...]) -> tuple[Any, ...]:
            return (*map(key_kind, key), *key)

        mapped = {typed(key[0]) for key in maps if key[0] is not GLOBAL}
        if mapped != {typed(k) for k, fb in zip(seg_keys, segments["fallback"]) if not fb}:
            raise bad("the segments table and the maps disagree on the segments or the types "
                      "of their keys")
    msw = meta["min_segment_weight"]
    if isinstance(msw, bool) or not isinstance(msw, (int, float)) or msw < 0:
        raise bad("min_segment_weight must be a number >= 0")
    if not (is_count(meta["n_rows"]) and is_count(meta["dropped_rows"])
            and is_number(meta["weight_total"]) and meta["weight_total"] >= 0):
        raise bad("n_rows, dropped_rows and weight_total must be numbers >= 0")
    if binary:
        model = maps.get((GLOBAL, None))
        if len(maps) != 1 or not isinstance(model, CalibrationModel) or \
                (meta["n_rows"], meta["weight_total"]) != (model.n_rows, model.weight_total):
            raise bad("a binary model is one map, of all rows and no class, with the counts "
                      "of model.json")
        return model
    try:
        return KeyedModel(method, maps, by=by, n_classes=k, params=meta["params"],
                          segments=segments, min_segment_weight=float(msw),
                          n_rows=meta["n_rows"], weight_total=meta["weight_total"],
                          dropped_rows=meta["dropped_rows"], columns=columns)
    except (ValueError, KeyError) as exc:
        raise bad(str(exc)) from exc


def _by_keys(segments: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The segments' table in the order of its keys; keys of several types (a fit takes
    int and str together) ordered by type name, then value."""
    try:
        ordered = segments.sort_values(by)
    except TypeError:
        ordered = segments.sort_values(by, key=lambda c: c.map(lambda v: (type(v).__name__, v)))
    return ordered.reset_index(drop=True)
