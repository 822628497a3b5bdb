"""The model directory (format ``distcal-keyed-model``, version 2) and its one writer.

Every model is a set of calibration maps by key (docs/design.md, "The model
is one class for every variant") and is saved so: a binary
:class:`~distcal.CalibrationModel` as the map of its one key (no segment,
no class), a :class:`~distcal.KeyedModel` as its maps. The directory holds

* ``model.json``: format, version, the library version, the model's method,
  settings (``params``), ``by``, ``n_classes``, columns, counts,
  ``min_segment_weight``, the segments' counts, each table's file name, rows
  and SHA-256, and the checksum of the rest of the document;
* ``maps.parquet``: one row per key: the segment's ``by`` values (null for
  the global maps), ``class`` (null for a binary score and for temperature
  scaling), ``n_rows``, ``weight``, the map's fitted parameters as JSON
  (``params``) and its number of blocks (``blocks``, -1 for none);
* ``blocks.parquet``: every map's blocks (isotonic, histogram, MODL), by map
  row (``map``), ``score_mean`` NaN where the map has none;
* ``steps.parquet``: every Venn-Abers map's step functions, by map row;
* ``segments.parquet``: the keys of the segments seen in fitting (``by``).

No pickle. :func:`distcal.load` reads it;
:mod:`distcal.legacy` reads the formats of distcal 0.1.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .core.keyed import GLOBAL, Key
from .core.venn_abers import Steps
from .errors import DataError
from .version import __version__

__all__ = ["FORMAT", "FORMAT_VERSION", "MAPS_FILE", "BLOCKS_FILE", "STEPS_FILE",
           "SEGMENTS_FILE", "write_model_dir", "steps_table"]

FORMAT = "distcal-keyed-model"
FORMAT_VERSION = 2
MAPS_FILE = "maps.parquet"
BLOCKS_FILE = "blocks.parquet"
STEPS_FILE = "steps.parquet"
SEGMENTS_FILE = "segments.parquet"
_BLOCK_COLUMNS = ("score_min", "score_max", "prob", "weight", "positives")


def write_model_dir(tmp: Path, method: str, maps: dict[Key, Any], *, by: list[str],
                    n_classes: int, params: dict[str, Any], columns: dict[str, Any],
                    n_rows: int, weight_total: float, dropped_rows: int,
                    min_segment_weight: float, segments: pd.DataFrame | None) -> None:
    """Write the model directory of ``maps`` into the new local directory ``tmp``.

    ``maps``: ``{key -> map}``, each a :class:`~distcal.CalibrationModel` or
    a :class:`~distcal.keyed_model.TemperatureMap`; the other arguments are
    the model's, as :class:`~distcal.KeyedModel` takes them (``segments``:
    its segments table when ``by`` is given).
    """
    tmp.mkdir()
    rows: dict[str, list[Any]] = {b: [] for b in by}
    rows.update({"class": [], "n_rows": [], "weight": [], "params": [], "blocks": []})
    block_parts, step_parts = [], []
    for i, key in enumerate(maps):
        segment, cls = key
        m = maps[key]
        for j, b in enumerate(by):
            rows[b].append(None if segment is GLOBAL else segment[j])
        rows["class"].append(cls)
        rows["n_rows"].append(int(m.n_rows))
        rows["weight"].append(float(m.weight_total))
        rows["params"].append(json.dumps(m.params, sort_keys=True, allow_nan=False))
        blocks = getattr(m, "_blocks", None)
        rows["blocks"].append(-1 if blocks is None else len(blocks))
        steps = getattr(m, "_steps", None)
        if steps is not None:
            table = steps_table(steps)
            step_parts.append(table.append_column(
                "map", pa.array(np.full(table.num_rows, i, dtype=np.int64))))
        if blocks is not None:
            cols = {"map": pa.array(np.full(len(blocks), i, dtype=np.int64))}
            cols.update({f: pa.array(np.asarray(getattr(blocks, f), dtype=np.float64))
                         for f in _BLOCK_COLUMNS})
            cols["score_mean"] = pa.array(blocks.score_mean if blocks.score_mean is not None
                                          else np.full(len(blocks), np.nan), type=pa.float64())
            block_parts.append(pa.table(cols))
    maps_table = pa.table({**{b: _arrow_column(rows[b], b) for b in by},
                           "class": pa.array(rows["class"], type=pa.int64()),
                           "n_rows": pa.array(rows["n_rows"], type=pa.int64()),
                           "weight": pa.array(rows["weight"], type=pa.float64()),
                           "params": pa.array(rows["params"], type=pa.string()),
                           "blocks": pa.array(rows["blocks"], type=pa.int64())})
    seg = segments if by else None
    meta: dict[str, Any] = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "library_version": __version__,
        "method": method, "by": by, "n_classes": n_classes, "params": params,
        "columns": columns, "n_rows": n_rows, "weight_total": weight_total,
        "dropped_rows": dropped_rows, "min_segment_weight": min_segment_weight,
        "segments": None if seg is None else {
            "n_rows": seg["n_rows"].astype(np.int64).tolist(),
            "weight": seg["weight"].astype(np.float64).tolist(),
            "fallback": seg["fallback"].astype(bool).tolist()},
        "tables": {}}
    tables = [("maps", MAPS_FILE, maps_table)]
    if seg is not None:
        tables.append(("segments", SEGMENTS_FILE,
                       pa.table({b: _arrow_column(seg[b].tolist(), b) for b in by})))
    if block_parts:
        tables.append(("blocks", BLOCKS_FILE, pa.concat_tables(block_parts)))
    if step_parts:
        tables.append(("steps", STEPS_FILE, pa.concat_tables(step_parts)))
    for name, file, table in tables:
        pq.write_table(table, tmp / file)
        meta["tables"][name] = {"file": file, "rows": table.num_rows,
                                "sha256": _sha256(tmp / file)}
    meta["checksum"] = _json_checksum(meta)
    with open(tmp / "model.json", "w") as fh:
        json.dump(meta, fh, indent=2, sort_keys=True, allow_nan=False)
        fh.write("\n")


def steps_table(steps: Steps) -> pa.Table:
    """The Venn-Abers steps as one table: ``kind`` (0: p0, 1: p1), ``score``, ``prob``."""
    kind = np.concatenate([np.zeros(steps.x0.shape[0], np.int8),
                           np.ones(steps.x1.shape[0], np.int8)])
    return pa.table({"kind": pa.array(kind, pa.int8()),
                     "score": pa.array(np.concatenate([steps.x0, steps.x1]), pa.float64()),
                     "prob": pa.array(np.concatenate([steps.v0, steps.v1]), pa.float64())})


def _arrow_column(values: list[Any], name: str) -> pa.Array:
    """The segment keys of column ``name`` as one Arrow column; keys of several Python
    types (a ``by`` column of ints and strings, which a fit accepts) are a DataError
    naming the column and the keys of each type; durations are one too (pyarrow reads
    pandas' Timedelta of other units than ns wrongly, and back they are another type)."""
    durations = sum(isinstance(v, (datetime.timedelta, np.timedelta64)) for v in values)
    if durations:
        raise DataError(f"column '{name}' (segment) holds durations ({durations} "
                        f"key{'' if durations == 1 else 's'}): a saved model does not store "
                        "durations as keys; cast the column to numbers (e.g. seconds) and fit "
                        "again")
    try:
        return pa.array(values)
    except OverflowError:  # integers of 2^63 and more: unsigned, or beyond 64 bits
        try:
            return pa.array(values, type=pa.uint64())
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise DataError(f"column '{name}' (segment) holds integer keys beyond 64 bits or "
                            "of both signs beyond 2^63; a saved model stores 64-bit integers: "
                            f"cast the column to text and fit again ({exc})") from exc
    except (pa.ArrowException, TypeError, ValueError) as exc:
        per_type: dict[str, int] = {}
        for v in values:
            if v is not None:
                per_type[type(v).__name__] = per_type.get(type(v).__name__, 0) + 1
        counts = ", ".join(f"{n} key{'' if n == 1 else 's'} of {kind}"
                           for kind, n in sorted(per_type.items()))
        raise DataError(f"column '{name}' (segment) holds keys of several types ({counts}); "
                        "a saved model stores one type per column: cast the column to one "
                        f"type and fit again ({exc})") from exc


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _json_checksum(meta: dict[str, Any]) -> str:
    """The checksum of a model.json (or a summary's summary.json): SHA-256 of every other
    field, as sorted JSON."""
    body = {k: v for k, v in meta.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
