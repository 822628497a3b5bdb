"""Multiclass rows of a Dask DataFrame: checked per partition, fitted by passes.

* Every partition is read and checked by the local engine's own code
  (:func:`distcal.multiclass.fit_rows`: the same problems, the same words),
  after one pass has counted the vector lengths over all partitions (K is
  the most common length, as locally). The valid rows with weight > 0 stay
  persisted where they were computed, as numpy arrays.
* Temperature scaling: logits (scikit-learn's rule, decided over all
  partitions) centred once per partition and persisted; every Newton step
  is one ``dask.compute`` of the partitions' sums
  (:func:`distcal.core.temperature.temperature_sums`).
* One-vs-rest, one shuffle for all classes: each partition pools its rows
  into one sorted run per class (score of class k, label == k, weight);
  per class, bounds from evenly spaced samples of the runs (as
  :class:`~distcal.engines.dask.DaskRanges` does) cut every run, and range
  (k, i) merges the i-th slices of class k. A pass computes each class's
  range function over its ranges.
* Transform: per partition by the local model, the temperature input rule
  decided over all partitions first.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

import numpy as np
import pandas as pd

from ..core.distinct import DistinctTable, merge_tables, pool_ties
from ..core.multiclass import looks_like_probabilities, to_logits
from ..core.rows import fit_rows, problems_message, vector_lengths
from ..core.temperature import center_logits, temperature_sums
from ..errors import DataError, column_not_found, output_column_exists
from ..logs import log, phase

__all__ = ["DaskMulticlassRows", "transform_multiclass"]


def _lengths(pdf: pd.DataFrame, name: str) -> np.ndarray:
    return vector_lengths(pdf, name) if len(pdf) else np.zeros(1, dtype=np.int64)


def _check_partition(pdf: pd.DataFrame, spec: dict[str, Any], length: int | None
                     ) -> dict[str, Any]:
    """The valid rows with weight > 0 of one partition, and its problem counts."""
    if not len(pdf):
        return {"empty": True}
    scores, labels, weights, k, problems = fit_rows(pdf, length=length, **spec)
    keep = ~problems.bad
    if weights is not None:
        with np.errstate(invalid="ignore"):
            keep &= weights > 0
    scores = scores[keep]
    return {"empty": False, "scores": scores, "labels": labels[keep].astype(np.intp),
            "weights": None if weights is None else weights[keep],
            "items": problems.items, "bad": int(np.count_nonzero(problems.bad)),
            "n": int(scores.shape[0]),
            "wsum": float(scores.shape[0] if weights is None else weights[keep].sum()),
            "probs": bool(scores.shape[0] == 0 or looks_like_probabilities(scores)),
            "k": k}


def _info(part: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in part.items() if k not in ("scores", "labels", "weights")}


def _centered(part: dict[str, Any], kind: str) -> dict[str, Any]:
    if part["empty"] or not part["n"]:
        return {"n": 0}
    return {"n": part["n"], "z": center_logits(to_logits(part["scores"], kind)),
            "y": part["labels"], "w": part["weights"]}


def _temperature(part: dict[str, Any], beta: float) -> np.ndarray:
    if not part["n"]:
        return np.zeros(3)
    return temperature_sums(part["z"], part["y"], part["w"], beta, centered=True)


def _rows(fn: Callable, part: dict[str, Any]) -> Any:
    if part["empty"] or not part["n"]:
        return None
    return fn(part["scores"], part["labels"], part["weights"])


def _class_runs(part: dict[str, Any], n_classes: int) -> dict[int, DistinctTable]:
    """One sorted run per class: (score of class k, label == k, weight) pooled by score."""
    if part["empty"] or not part["n"]:
        return {}
    s, y, w = part["scores"], part["labels"], part["weights"]
    if n_classes == 2:
        return {1: pool_ties(np.ascontiguousarray(s[:, -1]), (y == 1).astype(np.float64), w)}
    return {c: pool_ties(np.ascontiguousarray(s[:, c]), (y == c).astype(np.float64), w)
            for c in range(n_classes)}


def _samples(runs: dict[int, DistinctTable], size: int) -> dict[int, tuple[np.ndarray, int]]:
    out = {}
    for c, run in runs.items():
        if len(run):
            idx = np.linspace(0, len(run) - 1, min(size, len(run))).astype(np.intp)
            out[c] = (run.score[idx], len(run))
    return out


def _bounds(samples: list[tuple[np.ndarray, int]], k: int) -> np.ndarray:
    """k - 1 score bounds from run samples weighted by run length (DaskRanges' rule)."""
    values = np.concatenate([smp for smp, _ in samples])
    weights = np.concatenate([np.full(smp.shape[0], n / smp.shape[0]) for smp, n in samples])
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    marks = np.searchsorted(cum, cum[-1] * np.arange(1, k) / k)
    return np.unique(values[order][np.minimum(marks, len(order) - 1)])


def _cut(runs: dict[int, DistinctTable], c: int, bounds: np.ndarray) -> list[DistinctTable]:
    run = runs.get(c, DistinctTable.empty())
    cuts = np.concatenate(([0], np.searchsorted(run.score, bounds, side="left"), [len(run)]))
    return [run.slice(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]


def _apply(fn: Callable[[DistinctTable], Any], table: DistinctTable) -> Any:
    return fn(table) if len(table) else None


class DaskMulticlassRows:
    """The valid multiclass rows of a Dask DataFrame (see ``MulticlassRows``)."""

    def __init__(self, ddf: Any, *, method: str, score_col: str | None,
                 score_cols: list[str] | None, label_col: str, weight_col: str | None,
                 on_invalid: str, n_ranges: int | None = None, samples_per_range: int = 64,
                 **_: Any):
        import dask
        from dask import delayed

        from .dask import _workers_threads

        names = list(score_cols) if score_cols is not None else [str(score_col)]
        names += [label_col] + ([weight_col] if weight_col is not None else [])
        roles = ["score"] * (len(names) - 1 - (weight_col is not None)) + ["label"] + (
            ["weight"] if weight_col is not None else [])
        for name, role in zip(names, roles):
            if name not in ddf.columns:
                raise column_not_found(name, role, list(ddf.columns))
        parts = ddf[list(dict.fromkeys(names))].to_delayed(optimize_graph=True)
        length = None
        if score_cols is None:
            with phase("dask: vector lengths"):
                counts = dask.compute(*[delayed(_lengths)(p, score_col) for p in parts])
            total = np.zeros(max(len(c) for c in counts), dtype=np.int64)
            for c in counts:
                total[:len(c)] += c
            length = int(total.argmax())
        spec = {"method": method, "score_col": score_col, "score_cols": score_cols,
                "label_col": label_col, "weight_col": weight_col}
        checked = [delayed(_check_partition, pure=True)(p, spec, length) for p in parts]
        (self.checked,) = dask.persist(checked)
        with phase("dask: checking the multiclass rows"):
            infos = [i for i in dask.compute(*[delayed(_info)(c) for c in self.checked])
                     if not i["empty"]]
        if not infos:
            raise DataError("no rows to calibrate (after dropping invalid and zero-weight "
                            "rows)")
        items = [(c, p, sum(i["items"][j][2] for i in infos))
                 for j, (c, p, _) in enumerate(infos[0]["items"])]
        self.dropped_rows = sum(i["bad"] for i in infos)
        if self.dropped_rows and on_invalid == "raise":
            raise DataError(problems_message(items) + " (pass on_invalid='drop' to drop such "
                            "rows)")
        self.n_rows = sum(i["n"] for i in infos)
        if self.n_rows == 0:
            raise DataError("no rows to calibrate (after dropping invalid and zero-weight "
                            "rows)")
        self.weight_total = float(sum(i["wsum"] for i in infos))
        self.n_classes = int(infos[0]["k"])
        self.k_cols = len(score_cols) if score_cols is not None else int(length or 0)
        self.kind = ("probabilities" if method == "temperature" and self.k_cols >= 2
                     and all(i["probs"] for i in infos) else "logits")
        self.n_ranges = int(n_ranges or max(8, 2 * _workers_threads()))
        self.samples_per_range = samples_per_range
        self._centered: list[Any] | None = None
        self.ranges: dict[int, list[Any]] = {}
        log.info("dask: multiclass, K = %d, %d rows used (weight %g), %d dropped",
                 self.n_classes, self.n_rows, self.weight_total, self.dropped_rows)

    def temperature_parts(self, beta: float) -> list[np.ndarray]:
        """Per-partition [loss, grad, hess] at ``beta`` (one compute)."""
        import dask
        from dask import delayed

        if self._centered is None:
            (self._centered,) = dask.persist([delayed(_centered, pure=True)(c, self.kind)
                                              for c in self.checked])
            self.checked = []
        with phase("dask: one temperature pass (beta = %.6g)", beta):
            return list(dask.compute(*[delayed(_temperature)(c, beta)
                                       for c in self._centered]))

    def map_rows(self, fn: Callable[[np.ndarray, np.ndarray, np.ndarray | None], Any]
                 ) -> list[Any]:
        """``fn(scores, labels, weights)`` on each partition's valid rows (one compute)."""
        import dask
        from dask import delayed

        with phase("dask: one pass over the rows"):
            out = dask.compute(*[delayed(_rows)(fn, c) for c in self.checked])
        return [r for r in out if r is not None]

    def class_ranges(self, passes: int) -> None:
        """Per-class sorted runs, cut at per-class bounds: ranges of every class, one shuffle."""
        import dask
        from dask import delayed

        (runs,) = dask.persist([delayed(_class_runs, pure=True)(c, self.n_classes)
                                for c in self.checked])
        self.checked = []
        size = self.samples_per_range * self.n_ranges
        per_part = dask.compute(*[delayed(_samples)(r, size) for r in runs])
        ranges: dict[int, list[Any]] = {}
        for c in ([1] if self.n_classes == 2 else range(self.n_classes)):
            samples = [p[c] for p in per_part if c in p]
            if not samples:
                ranges[c] = []
                continue
            bounds = _bounds(samples, self.n_ranges)
            pieces = [delayed(_cut, pure=True, nout=len(bounds) + 1)(r, c, bounds)
                      for r in runs]
            ranges[c] = [delayed(merge_tables, pure=True)([piece[i] for piece in pieces])
                         for i in range(len(bounds) + 1)]
        (self.ranges,) = dask.persist(ranges)
        log.info("dask: (class, score) ranges for %d classes", len(ranges))

    def map_classes(self, fns: dict[int, Callable[[DistinctTable], Any]]) -> dict[int, list]:
        """One pass: ``fns[c]`` over class c's ranges, in ascending score order."""
        import dask
        from dask import delayed

        keys = [(c, i) for c in fns for i in range(len(self.ranges.get(c, [])))]
        with phase("dask: one pass over the (class, score) ranges"):
            results = dask.compute(*[delayed(_apply)(fns[c], self.ranges[c][i])
                                     for c, i in keys])
        out: dict[int, list[Any]] = {c: [] for c in fns}
        for (c, _), res in zip(keys, results):
            if res is not None:
                out[c].append(res)
        return out

    def close(self) -> None:
        self.checked, self.ranges, self._centered = [], {}, None

    def __enter__(self) -> DaskMulticlassRows:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


# ---------------------------------------------------------------------------
# Transform
# ---------------------------------------------------------------------------

def _looks_like_probs(pdf: pd.DataFrame, score_col: str | None,
                      score_cols: list[str] | None) -> bool:
    from ..core.rows import Problems, read_scores

    if not len(pdf):
        return True
    s = read_scores(pdf, score_col, score_cols, Problems(len(pdf)), finite=False)
    return looks_like_probabilities(s)


def transform_multiclass(model: Any, ddf: Any, score_col: str | None,
                         score_cols: list[str] | None, output_col: str) -> Any:
    """``ddf`` with ``output_col`` (one float64 array per row), lazily, per partition.

    Temperature scaling decides logits or probabilities over all partitions
    first (one compute), as the local model decides over all rows it is given.
    """
    import dask
    from dask import delayed

    names = list(score_cols) if score_cols is not None else [str(score_col)]
    for name in names:
        if name not in ddf.columns:
            raise column_not_found(name, "score", list(ddf.columns))
    if output_col in ddf.columns:
        raise output_column_exists(output_col)
    kind = "auto"
    if model.method == "temperature":
        flags = dask.compute(*[delayed(_looks_like_probs)(p, score_col, score_cols)
                               for p in ddf[names].to_delayed(optimize_graph=True)])
        kind = "probabilities" if all(flags) else "logits"
    meta = ddf._meta.copy()
    meta[output_col] = pd.Series([], dtype=object)

    def add(pdf: pd.DataFrame) -> pd.DataFrame:
        if not len(pdf):
            out = pdf.copy()
            out[output_col] = pd.Series([], dtype=object, index=pdf.index)
            return out
        return model.transform(pdf, score_col=score_col, score_cols=score_cols,
                               output_col=output_col, _logits=kind)

    return ddf.map_partitions(add, meta=meta)
