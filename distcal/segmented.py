"""Per-segment calibration: one map per key of the ``by`` columns, and the global map.

``distcal.fit(data, ..., by=cols)`` range-partitions the rows on the score
once; each range pools its rows by score (the global map) and by
(segment, score) (:mod:`distcal.core.segments`), so one shuffle serves the
global map and every segment, however many there are and whatever their
sizes (docs/segments.md). A segment whose total weight is below
``min_segment_weight`` (or, for histogram binning, with fewer rows than
``n_bins``), a key not seen in fitting, and a null key all use the global
map.

The :class:`SegmentedCalibrationModel` routes each row to its segment's
:class:`~distcal.model.CalibrationModel`: ``predict(scores, segments=keys)``
factorizes the keys and calls one ``predict`` per distinct segment.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .core.isotonic import clip_blocks, isotonic_from_parts, isotonic_part
from .core.segment_pav import take_blocks
from .core.segments import (
    SegmentParts,
    factorize_keys,
    gather_segments,
    isotonic_range,
    merge_segment_blocks,
    summarise_range,
)
from .core.validate import as_scores
from .defaults import DEFAULTS
from .errors import DataError, ModelError, ParameterError, column_not_found, sums_overflow
from .logs import log, phase
from .model import (
    _BLOCK_COLUMNS,
    CalibrationModel,
    _json_checksum,
    _library_version,
    _sha256,
    _short,
    blocks_from_table,
    build_or_damaged,
    check_model,
    read_checked_meta,
    read_model_json,
    read_table_file,
)
from .storage import filesystem_for, publish_dir

__all__ = ["SegmentedCalibrationModel", "fit_segmented", "check_by", "is_segmented_model",
           "load_segmented"]

FORMAT = "distcal-segmented-model"
FORMAT_VERSION = 1
SEGMENTS_FILE = "segments.parquet"
BLOCKS_FILE = "blocks.parquet"
_SEGMENT = "segment"  # the blocks table's column: row of the segments table, -1 global


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


class _Counts:
    """The counts ``fit_on_ranges`` reads from a Ranges, for one segment."""

    def __init__(self, seg: SegmentParts, spearman_rows: Callable[[], bool]):
        self.n_rows, self.weight_total, self.dropped_rows = seg.n_rows, seg.weight, 0
        self.spearman_rows = spearman_rows


def _replay(tables: list[Any]) -> Callable[[Callable[[Any], Any]], list[Any]]:
    """A map over one segment's ordered ranges, from its distinct-score tables."""
    return lambda fn: [fn(t) for t in tables]


def _identity(table: Any) -> Any:
    return table


def fit_segmented(impl: Any, data: Any, method: str, params: dict[str, Any],
                  columns: dict[str, str | None], by: list[str], min_segment_weight: float,
                  on_invalid: str, engine_opts: dict[str, Any],
                  fit_on_ranges: Callable[..., CalibrationModel]) -> SegmentedCalibrationModel:
    """The per-segment fit behind ``distcal.fit(..., by=...)`` (module docstring).

    Isotonic regression: one pass; each range sends every segment's PAV
    blocks of that range, and the driver merges them per segment (exact by
    the range argument, docs/design.md). Other methods: the global map as
    an unsegmented fit over the same ranges, and one pass that brings each
    segment's distinct-score tables to the driver, where each segment is
    fitted by the core over its own ordered ranges, with ``fit_on_ranges``
    (what :func:`distcal.fit` runs over an unsegmented input's ranges).
    """
    iso = method == "isotonic"
    with impl.open_segment_ranges(data, columns, by, on_invalid=on_invalid,
                                  finite_scores=method in ("sigmoid", "histogram"),
                                  passes=1 if iso else 4, **engine_opts) as ranges:
        with phase("fit by %s: %s", by, method):
            if iso and params["increasing"] != "auto":
                return _fit_isotonic_segments(ranges, params, columns, by, min_segment_weight)
            if iso:
                inc = params["increasing"]

                def part(t: Any) -> Any:
                    return isotonic_part(t, inc)

                summaries = ranges.map_segments(
                    lambda t, seg: summarise_range(t, seg, part, part))
                global_parts, segs = gather_segments(summaries)
                blocks, direction = isotonic_from_parts(global_parts, inc, params["y_min"],
                                                        params["y_max"], ranges.spearman_rows)
                global_model = CalibrationModel("isotonic", {**params, "increasing_": direction},
                                                blocks, n_rows=ranges.n_rows,
                                                weight_total=ranges.weight_total,
                                                dropped_rows=ranges.dropped_rows,
                                                columns=columns)
            else:
                global_model = fit_on_ranges(ranges, ranges.map, method, dict(params), columns)
                summaries = ranges.map_segments(
                    lambda t, seg: summarise_range(t, seg, None, _identity))
                _, segs = gather_segments(summaries)
            models: dict[tuple[Any, ...], CalibrationModel | None] = {}
            rows = []
            # Histogram binning needs at least n_bins rows (as an unsegmented fit
            # refuses fewer): smaller segments use the global map.
            min_rows = params["n_bins"] if method == "histogram" else 0
            for seg in segs:
                fallback = seg.weight < min_segment_weight or seg.n_rows < min_rows
                rows.append((*seg.key, seg.n_rows, seg.weight, fallback))
                if fallback:
                    models[seg.key] = None
                    continue

                def rho(key: tuple[Any, ...] = seg.key) -> bool:
                    return _segment_spearman(ranges, key)

                try:
                    if iso:
                        blocks, direction = isotonic_from_parts(
                            seg.parts, params["increasing"], params["y_min"], params["y_max"],
                            rho)
                        models[seg.key] = CalibrationModel(
                            "isotonic", {**params, "increasing_": direction}, blocks,
                            n_rows=seg.n_rows, weight_total=seg.weight, columns=columns)
                    else:
                        models[seg.key] = fit_on_ranges(
                            _Counts(seg, rho),
                            _replay(seg.parts), method, dict(params), columns)
                except DataError as exc:
                    raise DataError(f"segment {_key_text(by, seg.key)}: {exc}") from exc
    table = pd.DataFrame(rows, columns=[*by, "n_rows", "weight", "fallback"])
    log.info("fit by %s: %d segments, %d fall back to the global map", by, len(table),
             int(table["fallback"].sum()) if len(table) else 0)
    return SegmentedCalibrationModel(by, global_model, models, table,
                                     min_segment_weight=float(min_segment_weight))


def _fit_isotonic_segments(ranges: Any, params: dict[str, Any], columns: dict[str, str | None],
                           by: list[str], min_segment_weight: float
                           ) -> SegmentedCalibrationModel:
    """Isotonic regression in one direction: every segment's PAV in array operations.

    Each range sends its segments' blocks concatenated (:func:`isotonic_range`);
    the driver merges all segments with one :func:`merge_segment_blocks`.
    """
    inc = bool(params["increasing"])
    summaries = ranges.map_segments(lambda t, seg: isotonic_range(t, seg, inc))
    global_parts, keys, n_rows, weight, blocks, starts = merge_segment_blocks(summaries, inc)
    gblocks, _ = isotonic_from_parts(global_parts, inc, params["y_min"], params["y_max"])
    fitted = {**params, "increasing_": inc}
    global_model = CalibrationModel("isotonic", fitted, gblocks, n_rows=ranges.n_rows,
                                    weight_total=ranges.weight_total,
                                    dropped_rows=ranges.dropped_rows, columns=columns)
    fallback = weight < min_segment_weight
    # Sums that overflow are refused here for all segments at once; each
    # segment's CalibrationModel is then built on first use.
    with np.errstate(invalid="ignore"):
        if not (np.all(np.isfinite(blocks.weight)) and np.all(np.isfinite(blocks.positives))
                and not np.any(np.isnan(blocks.prob)) and np.all(np.isfinite(weight))):
            raise sums_overflow()
    # Each segment's model is only its place in the merged blocks until used:
    # building 10,000 CalibrationModels (or even slicing their blocks) would
    # cost the driver more than the merge itself.
    models: dict[tuple[Any, ...], Any] = {
        key: None if fb else _Deferred(blocks, lo, hi, fitted, n, w, columns)
        for key, fb, lo, hi, n, w in zip(keys, fallback.tolist(), starts[:-1].tolist(),
                                         starts[1:].tolist(), n_rows.tolist(), weight.tolist())}
    table = pd.DataFrame(keys, columns=by) if keys else pd.DataFrame({b: [] for b in by})
    table["n_rows"], table["weight"], table["fallback"] = n_rows, weight, fallback
    log.info("fit by %s: %d segments, %d fall back to the global map", by, len(table),
             int(fallback.sum()))
    return SegmentedCalibrationModel(by, global_model, models, table,
                                     min_segment_weight=float(min_segment_weight))


class _Deferred:
    """A segment's isotonic map, built when first used: blocks ``lo:hi`` of all segments'."""

    __slots__ = ("blocks", "lo", "hi", "params", "n_rows", "weight", "columns")

    def __init__(self, blocks: Any, lo: int, hi: int, params: dict[str, Any], n_rows: int,
                 weight: float, columns: dict[str, str | None]):
        self.blocks, self.lo, self.hi, self.params = blocks, lo, hi, params
        self.n_rows, self.weight, self.columns = n_rows, weight, columns

    def build(self) -> CalibrationModel:
        b = take_blocks(self.blocks, slice(self.lo, self.hi))
        if self.params["y_min"] is not None or self.params["y_max"] is not None:
            b = clip_blocks(b, self.params["y_min"], self.params["y_max"])
        return CalibrationModel("isotonic", self.params, b, n_rows=self.n_rows,
                                weight_total=self.weight, columns=self.columns)


def _segment_spearman(ranges: Any, key: tuple[Any, ...]) -> bool:
    rows = getattr(ranges, "segment_spearman_rows", None)
    if rows is None:
        raise ValueError("increasing='auto' by segment needs labels that are all 0/1 on this "
                         "engine (Spearman's sign of fractional labels needs each segment's "
                         "rows); pass increasing=True or False")
    return bool(rows(key))


def _key_text(by: list[str], key: tuple[Any, ...]) -> str:
    return ", ".join(f"{b}={_short(k)}" for b, k in zip(by, key))


class SegmentedCalibrationModel:
    """Calibration maps per segment of the ``by`` columns, and the global map.

    Made by ``distcal.fit(data, ..., by=cols)`` or :func:`distcal.load`.

    Attributes: ``by`` (the segment columns), ``global_model``,
    ``segments`` (a DataFrame: the ``by`` columns, ``n_rows``, ``weight``,
    ``fallback``), ``min_segment_weight``; ``method``, ``params``,
    ``n_rows``, ``weight_total``, ``dropped_rows`` and ``columns`` are the
    global model's.

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

    def __init__(self, by: list[str], global_model: CalibrationModel,
                 models: dict[tuple[Any, ...], CalibrationModel | None], segments: pd.DataFrame,
                 *, min_segment_weight: float = 0.0):
        self.by = list(by)
        self.global_model = global_model
        self._models: dict[tuple[Any, ...], Any] = dict(models)
        self._segments = segments.reset_index(drop=True)
        self.min_segment_weight = float(min_segment_weight)

    # -- the global model's attributes ------------------------------------
    @property
    def method(self) -> str:
        return self.global_model.method

    @property
    def params(self) -> dict[str, Any]:
        return self.global_model.params

    @property
    def n_rows(self) -> int:
        return self.global_model.n_rows

    @property
    def weight_total(self) -> float:
        return self.global_model.weight_total

    @property
    def dropped_rows(self) -> int:
        return self.global_model.dropped_rows

    @property
    def columns(self) -> dict[str, str | None]:
        return self.global_model.columns

    @property
    def segments(self) -> pd.DataFrame:
        """One row per segment seen in fitting: the ``by`` columns, n_rows, weight, fallback."""
        return self._segments.copy()

    def _key(self, key: Any) -> tuple[Any, ...]:
        if len(self.by) == 1 and not isinstance(key, tuple):
            return (key,)
        if not isinstance(key, tuple) or len(key) != len(self.by):
            raise KeyError(f"a segment key is a tuple of {len(self.by)} values "
                           f"({', '.join(self.by)}), got {key!r}")
        return key

    def segment(self, key: Any) -> CalibrationModel:
        """The map of one segment (the global map for a segment that falls back).

        ``key`` is a value, or a tuple of values for several ``by`` columns.
        A key not seen in fitting is a ``KeyError``.
        """
        k = self._key(key)
        if k not in self._models:
            raise KeyError(f"no segment {_key_text(self.by, k)} in this model "
                           f"({len(self._models)} segments)")
        return self._get(k) or self.global_model

    def _get(self, key: tuple[Any, ...]) -> CalibrationModel | None:
        """The fitted map of a segment (None: falls back), built on first use."""
        m = self._models.get(key)
        if isinstance(m, _Deferred):
            m = self._models[key] = m.build()
        return m

    def __repr__(self) -> str:
        n_fb = int(self._segments["fallback"].sum()) if len(self._segments) else 0
        return (f"SegmentedCalibrationModel(method={self.method!r}, by={self.by}, "
                f"segments={len(self._segments)}, fallback={n_fb}, n_rows={self.n_rows})")

    def __eq__(self, other: object) -> bool:
        """Equal by, global model, segments table and every segment's map (see CalibrationModel)."""
        if not isinstance(other, SegmentedCalibrationModel):
            return NotImplemented
        if self.by != other.by or self.global_model != other.global_model:
            return False
        if set(self._models) != set(other._models):
            return False
        if any((self._get(k) is None) != (other._get(k) is None)
               or (self._get(k) is not None and self._get(k) != other._get(k))
               for k in self._models):
            return False
        a = self._segments.sort_values(self.by).reset_index(drop=True)
        b = other._segments.sort_values(other.by).reset_index(drop=True)
        return bool(a[[*self.by, "n_rows", "fallback"]].astype(object).equals(
            b[[*self.by, "n_rows", "fallback"]].astype(object))
            and np.allclose(a["weight"], b["weight"], rtol=1e-9, atol=0))

    __hash__ = None  # type: ignore[assignment]

    # -- prediction -----------------------------------------------------
    def key_codes(self, segments: Any, n: int) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
        """Codes of the rows' keys (-1: null) and the key of each code."""
        if isinstance(segments, pd.DataFrame):
            for c in self.by:
                if c not in segments.columns:
                    raise column_not_found(c, "segment", map(str, segments.columns))
            cols = [segments[c] for c in self.by]
        elif len(self.by) == 1:
            values = segments.to_numpy() if isinstance(segments, (pd.Series, pd.Index)) \
                else segments
            cols = [pd.Series(list(values) if not isinstance(values, np.ndarray) else values,
                              dtype=object if not isinstance(values, np.ndarray) else None)]
        else:
            arr = np.empty((len(segments), len(self.by)), dtype=object)
            for i, row in enumerate(segments):
                if len(row) != len(self.by):
                    raise ValueError(f"each segment key needs {len(self.by)} values "
                                     f"({', '.join(self.by)}), got {row!r}")
                arr[i] = list(row)
            cols = [pd.Series(arr[:, j]) for j in range(len(self.by))]
        if any(len(c) != n for c in cols):
            raise ValueError(f"segments has {len(cols[0])} keys for {n} scores")
        return factorize_keys(cols)

    def model_for(self, key: tuple[Any, ...]) -> CalibrationModel:
        """The map a row with this key gets: its segment's, else the global map."""
        try:
            return self._get(key) or self.global_model
        except TypeError:  # an unhashable key is not a segment
            return self.global_model

    def predict(self, scores: Any, segments: Any = None) -> np.ndarray:
        """Probabilities for ``scores``, each with the map of its key in ``segments``.

        ``segments``: one key per score (values for one ``by`` column;
        tuples, a 2-D array or a DataFrame with the ``by`` columns for
        several). Null keys, keys not seen in fitting and segments that fall
        back get the global map. (``model.global_model.predict(scores)``
        applies the global map to all.)
        """
        s = as_scores(scores)  # real numbers only (no complex, dates, durations)
        if segments is None:
            raise TypeError(f"a model fitted by {self.by} needs each score's segment: "
                            "predict(scores, segments=keys); model.global_model.predict(scores) "
                            "applies the global map")
        codes, keys = self.key_codes(segments, s.shape[0])
        out = np.empty(s.shape[0], dtype=np.float64)
        # One predict per distinct map (segments sharing the global map together).
        groups: dict[int, tuple[CalibrationModel, list[int]]] = {}
        for c, key in enumerate(keys):
            m = self.model_for(key)
            groups.setdefault(id(m), (m, []))[1].append(c)
        glob = self.global_model
        groups.setdefault(id(glob), (glob, []))[1].append(-1)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(-1, len(keys) + 1))
        for m, cs in groups.values():
            idx = np.concatenate([order[bounds[c + 1]:bounds[c + 2]] for c in cs])
            if idx.shape[0]:
                out[idx] = m.predict(s[idx])
        return out

    def transform(self, data: Any, score_col: str = DEFAULTS.score_col,
                  output_col: str = DEFAULTS.output_col) -> Any:
        """``data`` with ``output_col`` = each row's segment map of ``score_col``.

        Reads the ``by`` columns from ``data``; pandas in, pandas out;
        pyarrow in, pyarrow out; a Parquet path in, pandas out; Spark frames
        inside the JVM (a broadcast join of the per-segment pieces), Dask
        frames per partition. Null and unseen keys get the global map.
        """
        from .engines import engine_of, get_engine

        return get_engine(engine_of(data)).transform_segmented(self, data, score_col,
                                                               output_col)

    # -- persistence ----------------------------------------------------
    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write one model directory: model.json, segments.parquet and blocks.parquet.

        ``segments.parquet``: one row per segment (the ``by`` columns,
        counts, ``fallback``, the segment's fitted parameters as JSON);
        ``blocks.parquet``: every segment's blocks and the global map's
        (``segment`` = row of the segments table, -1 for the global map).
        Published atomically, as :meth:`CalibrationModel.save`.
        """
        publish_dir(filesystem_for(os.fspath(path)), os.fspath(path), self.write_dir,
                    overwrite=overwrite)

    def write_dir(self, tmp: Path) -> None:
        """Write the model's files into the new local directory ``tmp``."""
        tmp.mkdir()
        seg = self._segments
        params, n_blocks, block_parts = [], [], []
        glob = self.global_model
        for i, key in enumerate(seg[self.by].itertuples(index=False, name=None)):
            m = self._get(tuple(key))
            params.append(None if m is None else json.dumps(m.params, sort_keys=True,
                                                            allow_nan=False))
            nb = -1 if m is None or m._blocks is None else len(m._blocks)
            n_blocks.append(nb)
            if nb > 0 and m is not None:
                block_parts.append(_blocks_table(m, i))
        if glob._blocks is not None:
            block_parts.append(_blocks_table(glob, -1))
        cols = {b: _arrow_column(seg[b]) for b in self.by}
        cols.update({"n_rows": pa.array(seg["n_rows"].to_numpy(np.int64)),
                     "weight": pa.array(seg["weight"].to_numpy(np.float64)),
                     "fallback": pa.array(seg["fallback"].to_numpy(bool)),
                     "params": pa.array(params, type=pa.string()),
                     "blocks": pa.array(n_blocks, type=pa.int64())})
        meta: dict[str, Any] = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "kind": "segmented",
            "library_version": _library_version(), "by": self.by,
            "min_segment_weight": self.min_segment_weight, "method": glob.method,
            "params": glob.params, "columns": glob.columns, "n_rows": glob.n_rows,
            "weight_total": glob.weight_total, "dropped_rows": glob.dropped_rows,
            "global_blocks": -1 if glob._blocks is None else len(glob._blocks), "tables": {}}
        for name, file, table in (("segments", SEGMENTS_FILE, pa.table(cols)),
                                  ("blocks", BLOCKS_FILE, pa.concat_tables(block_parts)
                                   if block_parts else None)):
            if table is None:
                continue
            pq.write_table(table, tmp / file)
            meta["tables"][name] = {"file": file, "rows": table.num_rows,
                                    "sha256": _sha256(tmp / file)}
        meta["checksum"] = _json_checksum(meta)
        with open(tmp / "model.json", "w") as fh:
            json.dump(meta, fh, indent=2, sort_keys=True, allow_nan=False)
            fh.write("\n")


def _arrow_column(values: pd.Series) -> pa.Array:
    try:
        return pa.array(values.tolist())
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise ValueError(f"segment keys of column {values.name!r} cannot be saved: {exc}") \
            from exc


def _blocks_table(model: CalibrationModel, segment: int) -> pa.Table:
    b = model._blocks
    assert b is not None
    cols = {_SEGMENT: pa.array(np.full(len(b), segment, dtype=np.int64))}
    cols.update({f: pa.array(np.asarray(getattr(b, f), dtype=np.float64))
                 for f in _BLOCK_COLUMNS})
    cols["score_mean"] = pa.array(b.score_mean if b.score_mean is not None
                                  else np.full(len(b), np.nan), type=pa.float64())
    return pa.table(cols)


# -- loading (untrusted input) ---------------------------------------------------

def is_segmented_model(root: Path) -> bool:
    """True when ``root``'s model.json has the segmented format (nothing else is checked)."""
    try:
        return read_model_json(root).get("format") == FORMAT
    except ModelError:
        return False


def load_segmented(root: Path) -> SegmentedCalibrationModel:
    """Read a directory written by :meth:`SegmentedCalibrationModel.save`.

    The directory is untrusted: the checksums of model.json and both
    tables, every segment's map (:func:`~distcal.model.check_model`),
    unique keys, and block counts are checked; anything inconsistent is a
    :class:`~distcal.ModelError`. Nothing in the directory is executed.
    """
    meta = read_checked_meta(root, FORMAT, FORMAT_VERSION, "segmented ")
    return build_or_damaged(root, lambda: _from_meta(root, meta))


def _from_meta(root: Path, meta: dict[str, Any]) -> SegmentedCalibrationModel:
    def bad(why: str) -> ModelError:
        return ModelError(f"'{root}' is damaged: {why}")

    by, tables = meta["by"], meta["tables"]
    if not (isinstance(by, list) and by and all(isinstance(b, str) for b in by)
            and len(set(by)) == len(by)):
        raise bad("by must be a list of distinct column names")
    if not isinstance(tables, dict) or set(tables) - {"segments", "blocks"} \
            or "segments" not in tables:
        raise bad("unexpected tables in model.json")
    seg = read_table_file(root, tables["segments"], SEGMENTS_FILE)
    expected = {*by, "n_rows", "weight", "fallback", "params", "blocks"}
    if set(seg.schema.names) != expected:
        raise ModelError(f"'{root / SEGMENTS_FILE}' does not hold the expected columns")
    blocks_table = (read_table_file(root, tables["blocks"], BLOCKS_FILE)
                    if "blocks" in tables else None)
    if blocks_table is not None and (
            set(blocks_table.schema.names) != {_SEGMENT, *_BLOCK_COLUMNS, "score_mean"}
            or not pa.types.is_integer(blocks_table.schema.field(_SEGMENT).type)):
        raise ModelError(f"'{root / BLOCKS_FILE}' does not hold the expected blocks")
    owner = (np.zeros(0, dtype=np.int64) if blocks_table is None
             else blocks_table.column(_SEGMENT).to_numpy().astype(np.int64))
    order = np.argsort(owner, kind="stable")
    sorted_owner = owner[order]

    def blocks_of(i: int, expected_n: Any, where: str) -> Any:
        if expected_n == -1:
            return None
        lo, hi = np.searchsorted(sorted_owner, [i, i + 1])
        if isinstance(expected_n, bool) or not isinstance(expected_n, int) \
                or hi - lo != expected_n or blocks_table is None:
            raise bad(f"{where} has {hi - lo} blocks in the table, {_short(expected_n)} "
                      "expected")
        part = blocks_table.take(pa.array(order[lo:hi]))
        if np.all(np.isnan(part.column("score_mean").to_numpy())):
            part = part.drop_columns(["score_mean"])
        return blocks_from_table(part, f"'{root / BLOCKS_FILE}' ({where})", keys=(_SEGMENT,))

    method, params, columns = meta["method"], meta["params"], meta["columns"]
    counts = {k: meta[k] for k in ("n_rows", "weight_total", "dropped_rows")}
    gblocks = blocks_of(-1, meta["global_blocks"], "the global map")
    try:
        check_model(method, params, gblocks, columns=columns, **counts)
    except ValueError as exc:
        raise bad(f"the global map: {exc}") from exc
    glob = CalibrationModel(method, params, gblocks, columns=columns, **counts)
    keys = list(zip(*[seg.column(b).to_pylist() for b in by])) if seg.num_rows else []
    if len(set(keys)) != len(keys):
        raise bad("a segment key appears twice")
    n_rows = seg.column("n_rows").to_pylist()
    weight = seg.column("weight").to_pylist()
    fallback = seg.column("fallback").to_pylist()
    seg_params = seg.column("params").to_pylist()
    n_blocks = seg.column("blocks").to_pylist()
    models: dict[tuple[Any, ...], CalibrationModel | None] = {}
    used = len(gblocks) if gblocks is not None else 0
    for i, key in enumerate(keys):
        where = f"segment {_key_text(by, key)}"
        if any(v is None for v in key):
            raise bad(f"{where} has a null key")
        if not isinstance(fallback[i], bool):
            raise bad(f"{where}: fallback must be true or false")
        if not (isinstance(weight[i], float) and math.isfinite(weight[i])) \
                or (weight[i] < meta["min_segment_weight"] and not fallback[i]):
            raise bad(f"{where}: weight and fallback disagree with min_segment_weight")
        if fallback[i]:
            if seg_params[i] is not None or n_blocks[i] != -1:
                raise bad(f"{where} falls back but has a map")
            models[key] = None
            continue
        p = json.loads(seg_params[i], parse_constant=_reject)
        b = blocks_of(i, n_blocks[i], where)
        used += 0 if b is None else len(b)
        parts = {"n_rows": n_rows[i], "weight_total": weight[i], "dropped_rows": 0}
        try:
            check_model(method, p, b, columns=columns, **parts)
        except ValueError as exc:
            raise bad(f"{where}: {exc}") from exc
        models[key] = CalibrationModel(method, p, b, columns=columns, **parts)
    if used != owner.shape[0]:
        raise bad("the blocks table has blocks of no segment")
    msw = meta["min_segment_weight"]
    if isinstance(msw, bool) or not isinstance(msw, (int, float)) or msw < 0:
        raise bad("min_segment_weight must be a number >= 0")
    table = pd.DataFrame(keys, columns=by) if keys else pd.DataFrame({b: [] for b in by})
    table["n_rows"] = np.asarray(n_rows, dtype=np.int64)
    table["weight"] = np.asarray(weight, dtype=np.float64)
    table["fallback"] = np.asarray(fallback, dtype=bool)
    return SegmentedCalibrationModel(by, glob, models, table, min_segment_weight=float(msw))


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")

