"""The fit of every variant with keys: one pass over keyed rows, every key's plan in lock step.

``distcal.fit`` with ``by=`` and/or multiclass scores comes here
(:func:`fit_keyed`). The engine opens the keyed rows of the input
(:meth:`~distcal.engines.base.Engine.open_keyed`: range-partitioned on
score, pooled by (key, score)); the method runs for every key at once:

* isotonic regression in a fixed direction: every key's PAV in array
  operations, range by range, merged per key on the driver
  (:func:`~distcal.core.segment_pav.merge_keyed_pav`);
* every other method: its plan (:mod:`distcal.core.plans`) per key, all
  keys advancing together, one job per pass;
* temperature scaling: its plan over parts of the rows, one key per segment.

What reaches the driver per pass is each key's small summary, never a
key's table. The maps and the combiner make a
:class:`~distcal.keyed_model.KeyedModel`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Generator, Iterable
from typing import Any

import numpy as np
import pandas as pd

from .core.beta import NoMinimum, beta_plan
from .core.discretize import modl_plan
from .core.histogram import histogram_plan
from .core.isotonic import clip_blocks, isotonic_plan
from .core.keyed import GLOBAL, Key, KeyedTable, KeySpec, in_key_order, key_text
from .core.plans import KeyCounts, KeyFailed, run_plans
from .core.rows import LabelsNotBinaryError, RowPart
from .core.segment_pav import KeyedPav, merge_keyed_pav, take_blocks
from .core.sigmoid import sigmoid_plan
from .core.temperature import temperature_plan
from .core.threshold import TIE
from .core.venn_abers import venn_abers_plan
from .errors import DataError, ParameterError, sums_overflow
from .keyed_model import KeyedModel, TemperatureMap, class_columns
from .logs import log, phase
from .model import CalibrationModel

__all__ = ["fit_keyed", "check_by", "FINITE_SCORE_METHODS"]

# The methods whose rows need finite scores (a row of score +-inf is invalid for them).
FINITE_SCORE_METHODS = ("sigmoid", "histogram", "temperature", "beta")


def check_by(by: Any, columns: dict[str, str | None], min_segment_weight: Any) -> list[str]:
    """The ``by`` columns as a list, and ``min_segment_weight``, checked before any read."""
    names = [by] if isinstance(by, str) else by
    if not (isinstance(names, (list, tuple)) and names
            and all(isinstance(n, str) and n for n in names)):
        raise ParameterError(f"by must be a column name or a non-empty list of column names, "
                             f"got {by!r}")
    if len(set(names)) != len(names):
        raise ParameterError(f"by names a column twice: {list(names)}")
    used = {c: r for r, c in columns.items() if c is not None}
    for n in names:
        if n in used:
            raise ParameterError(f"by column {n!r} is also the {used[n]} column")
    if isinstance(min_segment_weight, bool) or not isinstance(min_segment_weight, (int, float)) \
            or not math.isfinite(min_segment_weight) or min_segment_weight < 0:
        raise ParameterError(f"min_segment_weight must be a finite number >= 0, got "
                             f"{min_segment_weight!r}")
    return list(names)


def _method_plan(method: str, params: dict[str, Any], directions: Callable[[Key], bool],
                 score_name: Callable[[Key | None], str | None] = lambda key: None,
                 label_name: str | None = None, fit_rows: Callable[[], int] = lambda: 0
                 ) -> Callable[[Key | None], Generator[Any, Any, Any]]:
    """The plan of ``method`` for a key; ``directions(key)``: the sign of Spearman's rho
    of the key's rows (isotonic "auto" with labels that are not all 0/1);
    ``score_name(key)`` and ``label_name``: the key's columns, for messages;
    ``fit_rows()``: the rows of the fit, all keys together (known once the
    first pass has run, before any key's plan is made)."""
    if method == "isotonic":
        def isotonic(key: Key | None) -> Generator[Any, Any, Any]:
            return isotonic_plan(params["increasing"], params["y_min"], params["y_max"],
                                 spearman_rows=lambda: directions(key) if key else True)
        return isotonic
    if method == "sigmoid":
        return lambda key: sigmoid_plan()
    if method == "histogram":
        return lambda key: histogram_plan(params["n_bins"], params["strategy"])
    if method == "modl":
        return lambda key: modl_plan(max_groups=params["max_groups"])
    if method == "beta":
        return lambda key: beta_plan(score_name(key))
    if method == "venn_abers":
        return lambda key: venn_abers_plan(label_name, fit_rows() if key else 0)
    return lambda key: temperature_plan()


class _KeyRows:
    """A part's valid (score, label) rows of each wanted key (a binary score)."""

    def __init__(self, wanted: set[Key], by: bool):
        self.wanted, self.by = wanted, by

    def __call__(self, rows: RowPart) -> dict[Key, tuple[np.ndarray, np.ndarray]]:
        return {key: (part.score, part.label)
                for key, part in _RowKeys(self.by)(rows, self.wanted)}


class _RowDirections:
    """Each key's sign of Spearman's rho over its rows, computed when first asked.

    Only isotonic ``increasing="auto"`` with labels that are not all 0/1
    asks (0/1 labels decide from sums over the score ranges). Ranks of
    fractional labels are no such sum, so the scores and labels of the keys
    with such labels come to the driver, in one pass over the rows for all
    of them, and scipy's ``spearmanr`` decides (as scikit-learn's
    IsotonicRegression does; rho >= 0 or undefined: increasing).
    """

    def __init__(self, map_rows: Callable[[Any], list[Any]], by: bool,
                 counts: dict[Key, KeyCounts]):
        self.map_rows, self.by, self.counts = map_rows, by, counts
        self.signs: dict[Key, bool] | None = None

    def __call__(self, key: Key) -> bool:
        if self.signs is None:
            from scipy.stats import spearmanr

            wanted = {k for k, c in self.counts.items() if not c.binary}
            rows: dict[Key, list[Any]] = {}
            for part in self.map_rows(_KeyRows(wanted, self.by)):  # (summaries: refused)
                for k, pair in part.items():
                    rows.setdefault(k, []).append(pair)
            log.warning("increasing='auto' with labels that are not all 0/1: the scores and "
                        "labels of %d key(s) came to the driver (Spearman's rho needs the "
                        "rows' ranks); pass increasing=True or False to avoid it", len(wanted))
            self.signs = {}
            for k, pairs in rows.items():
                with np.errstate(invalid="ignore", divide="ignore"):
                    rho = spearmanr(np.concatenate([p[0] for p in pairs]),
                                    np.concatenate([p[1] for p in pairs])).statistic
                self.signs[k] = not (rho < 0)
        return self.signs[key]


class _Riding:
    """``fn`` of a range and ``ride`` of the same range (a pass shared with another result)."""

    def __init__(self, fn: Callable[[KeyedTable], Any], ride: Callable[[KeyedTable], Any]):
        self.fn, self.ride = fn, ride

    def __call__(self, part: KeyedTable) -> tuple[Any, Any]:
        return self.fn(part), self.ride(part)


def _map_from(method: str, params: dict[str, Any], result: Any, counts: KeyCounts,
              columns: dict[str, Any]) -> Any:
    """The calibration map of one key from its plan's result."""
    fitted = dict(params)
    blocks = None
    if method == "isotonic":
        blocks, direction = result
        fitted["increasing_"] = direction
    elif method == "sigmoid":
        fitted.update(a=result[0], b=result[1])
    elif method == "beta":
        fitted.update(a=result[0], b=result[1], c=result[2])
    elif method == "venn_abers":
        return CalibrationModel(method, fitted, n_rows=counts.n_rows,
                                weight_total=counts.weight, columns=columns, steps=result)
    elif method == "histogram":
        edges, bin_prob, blocks = result
        fitted.update(edges=edges.tolist(), bin_prob=bin_prob.tolist())
    elif method == "modl":
        blocks, cost, exact, groups = result
        fitted.update(cost=cost, exact=exact, groups=groups)
    else:
        beta, kind = result
        return TemperatureMap(float(beta), kind, counts.n_rows, counts.weight)
    return CalibrationModel(method, fitted, blocks, n_rows=counts.n_rows,
                            weight_total=counts.weight, columns=columns)


class _RowKeys:
    """A part of the rows as its keys' rows: every row is the global key's and, with
    ``by``, its segment's (:data:`~distcal.core.plans.Split`)."""

    def __init__(self, by: bool):
        self.by = by

    def __call__(self, rows: RowPart, wanted: Container[Key] | None = None
                 ) -> Iterable[tuple[Key, RowPart]]:
        """The wanted keys' rows, a part each."""
        if wanted is None or (GLOBAL, None) in wanted:
            yield (GLOBAL, None), rows
        if self.by:
            for seg, part in rows.by_segment():
                if wanted is None or (seg, None) in wanted:
                    yield (seg, None), part

    def groups(self, rows: RowPart) -> list[tuple[list[Key], np.ndarray | None]]:
        """The keys as groupings of the rows, for batched requests: the global key's
        (every row), then the segments with rows and each row's index among them
        (-1: a null segment's row, the global key's only)."""
        out: list[tuple[list[Key], np.ndarray | None]] = [([(GLOBAL, None)], None)]
        if self.by and rows.segments is not None:
            codes, keys = rows.segments
            present = np.bincount(codes[codes >= 0], minlength=len(keys)) > 0
            index = np.append(np.cumsum(present) - 1, -1)  # (code -1 reads the last: -1)
            out.append(([(keys[c], None) for c in np.flatnonzero(present).tolist()],
                        index[codes]))
        return out


def fit_keyed(impl: Any, data: Any, spec: KeySpec, method: str, params: dict[str, Any],
              min_segment_weight: float, on_invalid: str, engine_opts: dict[str, Any],
              ride: Callable[[KeyedTable], Any] | None = None
              ) -> tuple[KeyedModel | CalibrationModel, list[Any]]:
    """Fit every key of ``spec`` with ``method`` on engine ``impl`` (module docstring).

    A binary score without ``by`` gives its :class:`~distcal.model.CalibrationModel`.
    ``ride``: a function of each range that shares the fit's first pass over
    the ranges; its results (ascending) are returned with the model.
    """
    by = list(spec.by)
    binary = not by and not spec.multiclass
    finite = method in FINITE_SCORE_METHODS
    # One key: its plan (per-range PAV merged in order); many: every key's PAV at once.
    iso_fixed = method == "isotonic" and params["increasing"] != "auto" and not binary
    passes = 1 if method == "isotonic" and params["increasing"] != "auto" else 4
    counts: dict[Key, KeyCounts] = {}
    # Histogram binning needs at least n_bins rows (as an unsegmented fit refuses
    # fewer): smaller segments use the global map, as do light ones.
    min_rows = params["n_bins"] if method == "histogram" else 0

    def keep(key: Key, c: KeyCounts) -> bool:
        # A segment's weight is a sum whose last bits depend on the order of its rows (per
        # range, per engine): within TIE of the minimum is not below it.
        return key[0] is GLOBAL or (c.weight >= min_segment_weight * (1.0 - TIE)
                                    and c.n_rows >= min_rows)

    riding: list[Any] = []
    with impl.open_keyed(data, spec, on_invalid=on_invalid, finite_scores=finite,
                         passes=passes, **engine_opts) as ranges:

        def map_ranges(fn: Callable[[KeyedTable], Any]) -> list[Any]:
            if ride is None or riding:
                return list(ranges.map(fn))
            both = ranges.map(_Riding(fn, ride))
            riding.extend(b[1] for b in both)
            return [b[0] for b in both]

        columns = _columns(spec)
        plan = _method_plan(method, params, _RowDirections(ranges.map_rows, bool(by), counts),
                            lambda key: None if key is None
                            else class_columns(columns, key).get("score"), spec.label_col,
                            lambda: ranges.n_rows)
        what = "by " + ", ".join(by) if by else "multiclass" if spec.multiclass else "binary"
        with phase("fit %s: %s", what, method):
            try:
                if method == "temperature":
                    results = run_plans(plan, ranges.map_rows, split=_RowKeys(bool(by)),
                                        keep=keep, counts=counts)
                elif iso_fixed:
                    results = _isotonic_fixed(map_ranges, bool(params["increasing"]), params,
                                              keep, counts)
                else:
                    results = run_plans(plan, map_ranges, keep=keep, counts=counts,
                                        narrow=ranges.narrow, budget=ranges.result_bytes)
            except KeyFailed as failed:
                if isinstance(failed.error, LabelsNotBinaryError):
                    # Summaries (rows with such labels are invalid rows: KeySpec's
                    # zero_one_labels); they hold sums, no rows to count.
                    raise DataError(f"column '{spec.label_col}' (label): the summarised rows "
                                    f"hold labels other than 0 and 1; {failed.error.needs}"
                                    ) from failed.error
                raise _key_error(by, failed, method) from failed.error
        if not all(math.isfinite(counts[key].weight) for key in results):
            raise sums_overflow()  # (the methods whose sums did not overflow first)
        if method == "beta":
            results = _drop_one_class(by, results)
        maps = {key: _map_from(method, params, res, counts[key], class_columns(columns, key))
                for key, res in results.items()}
        segments = _segments_table(by, counts, maps) if by else None
        n_classes = ranges.n_classes
        totals = (ranges.n_rows, ranges.weight_total, ranges.dropped_rows)
    if binary:
        model = maps[(GLOBAL, None)]
        model.dropped_rows = int(totals[2])
        return model, riding
    if segments is not None:
        log.info("fit by %s: %d segments, %d fall back to the global map", by, len(segments),
                 int(segments["fallback"].sum()))
    return KeyedModel(method, maps, by=by, n_classes=n_classes,
                      params=dict(params), segments=segments,
                      min_segment_weight=min_segment_weight, n_rows=totals[0],
                      weight_total=totals[1], dropped_rows=totals[2], columns=columns), riding


def _drop_one_class(by: list[str], results: dict[Key, Any]) -> dict[Key, Any]:
    """Beta: keys whose labels are all 0 or all 1 have no fit (:class:`NoMinimum`).

    Such a key of all rows is a DataError; such a segment (any of its
    classes) falls back to the global maps, as a light segment does, with a
    warning.
    """
    bad = {key: r for key, r in results.items() if isinstance(r, NoMinimum)}
    for key, r in bad.items():
        if key[0] is GLOBAL:
            where = "" if key[1] is None else f"{key_text(by, key)}: "
            raise DataError(where + r.message())
    if not bad:
        return results
    segments = {key[0] for key in bad}
    log.warning("beta calibration: %d segment(s) hold rows of one class only (%s); they use "
                "the global map", len(segments),
                "; ".join(key_text(by, k) + ": " + r.message() for k, r in list(bad.items())[:3]))
    return {key: r for key, r in results.items() if key[0] not in segments}


def _isotonic_fixed(map_ranges: Any, increasing: bool, params: dict[str, Any],
                    keep: Callable[[Key, KeyCounts], bool],
                    counts: dict[Key, KeyCounts]) -> dict[Key, Any]:
    """Isotonic regression in one direction: every key's PAV in array operations."""
    keys, n_rows, weight, binary, blocks, starts = merge_keyed_pav(
        map_ranges(KeyedPav(increasing)), increasing)
    with np.errstate(invalid="ignore"):
        if not (np.all(np.isfinite(blocks.weight)) and np.all(np.isfinite(blocks.positives))
                and not np.any(np.isnan(blocks.prob)) and np.all(np.isfinite(weight))):
            raise sums_overflow()
    out: dict[Key, Any] = {}
    for i, key in enumerate(keys):
        c = counts[key] = KeyCounts(int(n_rows[i]), float(weight[i]), bool(binary[i]))
        if not keep(key, c):
            continue
        b = take_blocks(blocks, slice(int(starts[i]), int(starts[i + 1])))
        out[key] = (clip_blocks(b, params["y_min"], params["y_max"]), increasing)
    return out


def _key_error(by: list[str], failed: KeyFailed, method: str) -> Exception:
    err = failed.error
    if method == "modl" and type(err) is ValueError:  # weights that are not 1 (refused
        err = DataError(str(err))                      # before the fit, from its columns)
    if failed.key[0] is GLOBAL and failed.key[1] is None:
        return err  # the fit of all rows: the message of an unsegmented fit
    if isinstance(err, ParameterError):
        return err
    return DataError(f"{key_text(by, failed.key)}: {err}")


def _columns(spec: KeySpec) -> dict[str, Any]:
    if spec.multiclass:
        return {"score": None if spec.score_cols is not None else spec.score_col,
                "scores": None if spec.score_cols is None else list(spec.score_cols),
                "label": spec.label_col, "weight": spec.weight_col}
    return {"score": spec.score_col, "label": spec.label_col, "weight": spec.weight_col}


def _segments_table(by: list[str], counts: dict[Key, KeyCounts],
                    maps: dict[Key, Any]) -> pd.DataFrame:
    """One row per segment: the ``by`` values, rows, weight, and whether it falls back."""
    seen: dict[tuple[Any, ...], KeyCounts] = {}
    for (segment, _), c in counts.items():
        if segment is not GLOBAL:
            seen.setdefault(segment, c)
    fitted = {segment for segment, _ in maps}
    keys = in_key_order(seen)
    table = pd.DataFrame(keys, columns=by) if keys else pd.DataFrame({b: [] for b in by})
    table["n_rows"] = np.array([seen[k].n_rows for k in keys], dtype=np.int64)
    table["weight"] = np.array([seen[k].weight for k in keys], dtype=np.float64)
    table["fallback"] = np.array([k not in fitted for k in keys], dtype=bool)
    return table
