"""Readers of the model directories of distcal 0.1's three formats.

Every model is now saved in one format (:mod:`distcal.model_format`);
distcal 0.1 wrote three, version 1 each, and they load and predict exactly
as before:

* binary models (``distcal-model``: ``model.json`` with the fitted
  parameters, ``blocks.parquet`` or, Venn-Abers, ``steps.parquet``; written
  until every model became the keyed format) load as the
  :class:`~distcal.CalibrationModel` they were;
* multiclass models (``distcal-multiclass-model``: ``classes.parquet``) and
  segmented models (``distcal-segmented-model``: ``segments.parquet`` and
  ``blocks.parquet``) load as the :class:`~distcal.keyed_model.KeyedModel`
  that fitting the same rows gives today.

The directories are untrusted input: every rule of :func:`distcal.load`
applies.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .core.keyed import GLOBAL, Key, key_text
from .errors import ModelError, short_repr
from .keyed_model import KeyedModel, TemperatureMap
from .model import (
    CalibrationModel,
    MapRows,
    blocks_from_table,
    check_model,
    checked_map,
    damaged,
    is_count,
    parse_model_json,
    read_table_file,
    steps_from_table,
)
from .model_format import _BLOCK_COLUMNS

__all__ = ["binary_from_meta", "multiclass_from_meta", "segmented_from_meta"]

BINARY_FORMAT = "distcal-model"
MULTICLASS_FORMAT = "distcal-multiclass-model"
SEGMENTED_FORMAT = "distcal-segmented-model"
METHODS = ("isotonic", "sigmoid", "histogram", "temperature")
_TABLE_FILE = "classes.parquet"
SEGMENTS_FILE = "segments.parquet"
BLOCKS_FILE = "blocks.parquet"
STEPS_FILE = "steps.parquet"
_SEGMENT = "segment"  # the blocks table's column: row of the segments table, -1 global


def binary_from_meta(root: Path, meta: dict[str, Any]) -> CalibrationModel:
    """A binary model (``distcal-model``): ``blocks.parquet`` or, Venn-Abers,
    ``steps.parquet``, every parameter and table checked (:func:`~distcal.model.check_model`)."""
    tables = meta["tables"]
    if not isinstance(tables, dict) or set(tables) - {"blocks", "steps"}:
        raise damaged(root, "unexpected tables in model.json")
    blocks = steps = None
    if "blocks" in tables:
        blocks = blocks_from_table(read_table_file(root, tables["blocks"], BLOCKS_FILE),
                                   f"'{root / BLOCKS_FILE}'")
    if "steps" in tables:
        steps = steps_from_table(read_table_file(root, tables["steps"], STEPS_FILE),
                                 f"'{root / STEPS_FILE}'")
    parts = {k: meta[k] for k in ("n_rows", "weight_total", "dropped_rows", "columns")}
    check_model(meta["method"], meta["params"], blocks, steps=steps, **parts)
    return CalibrationModel(meta["method"], meta["params"], blocks, steps=steps, **parts)


def multiclass_from_meta(root: Path, meta: dict[str, Any]) -> KeyedModel:
    """A multiclass model (``distcal-multiclass-model``): ``classes.parquet``, every class
    model checked as a binary one."""
    bad = partial(damaged, root)
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
        params = meta["params"]
        if params.get("input_", "logits") not in ("logits", "probabilities"):
            raise bad("input_ must be 'logits' or 'probabilities'")
        tmap = TemperatureMap(float(beta), params.get("input_", "logits"), meta["n_rows"],
                              meta["weight_total"])
        return KeyedModel(method, {(GLOBAL, None): tmap}, n_classes=k,
                          n_rows=meta["n_rows"], weight_total=meta["weight_total"],
                          dropped_rows=meta["dropped_rows"], columns=meta["columns"])
    if not isinstance(entries, list) or len(entries) != k:
        raise bad(f"expected {k} per-class entries")
    table = None
    if "classes" in tables:
        table = read_table_file(root, tables["classes"], _TABLE_FILE)
        if set(table.schema.names) != {"class", *_BLOCK_COLUMNS} or not pa.types.is_integer(
                table.schema.field("class").type):
            raise ModelError(f"'{root / _TABLE_FILE}' does not hold the expected per-class "
                             "blocks")
    if set(tables) - {"classes"}:
        raise bad(f"unknown tables {sorted(map(str, tables))[:5]}")
    rows = MapRows(root, table, _TABLE_FILE, "class")
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
        blocks = rows.blocks(i, -1 if e["blocks"] is None else e["blocks"], f"class {i}",
                             short_repr)
        parts = {f: e[f] for f in ("n_rows", "weight_total", "dropped_rows", "columns")}
        models.append(checked_map(root, f"class {i}", method, e["params"], blocks, **parts))
    if rows.taken != rows.total:
        raise bad("the blocks table has rows of no class")
    for f in ("n_rows", "dropped_rows"):
        if not is_count(meta[f]):
            raise bad(f"{f} must be an integer >= 0")
    maps: dict[Key, Any] = {(GLOBAL, c): m for c, m in enumerate(models) if m is not None}
    return KeyedModel(method, maps, n_classes=k, params=meta["params"], n_rows=meta["n_rows"],
                      weight_total=meta["weight_total"], dropped_rows=meta["dropped_rows"],
                      columns=meta["columns"])


def segmented_from_meta(root: Path, meta: dict[str, Any]) -> KeyedModel:
    """A segmented model (``distcal-segmented-model``): every segment's map
    (:func:`~distcal.model.check_model`), unique keys and block counts checked."""
    bad = partial(damaged, root)
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
    rows = MapRows(root, blocks_table, BLOCKS_FILE, _SEGMENT)
    method, params, columns = meta["method"], meta["params"], meta["columns"]
    counts = {k: meta[k] for k in ("n_rows", "weight_total", "dropped_rows")}
    where = "the global map"
    glob = checked_map(root, where, method, params,
                       rows.blocks(-1, meta["global_blocks"], where, short_repr), columns=columns,
                       **counts)
    keys = list(zip(*[seg.column(b).to_pylist() for b in by])) if seg.num_rows else []
    if len(set(keys)) != len(keys):
        raise bad("a segment key appears twice")
    n_rows = seg.column("n_rows").to_pylist()
    weight = seg.column("weight").to_pylist()
    fallback = seg.column("fallback").to_pylist()
    seg_params = seg.column("params").to_pylist()
    n_blocks = seg.column("blocks").to_pylist()
    models: dict[tuple[Any, ...], CalibrationModel | None] = {}
    for i, key in enumerate(keys):
        where = f"segment {key_text(by, (key, None))}"
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
        p = parse_model_json(seg_params[i], root / SEGMENTS_FILE, f"params of {where}: ")
        models[key] = checked_map(root, where, method, p,
                                  rows.blocks(i, n_blocks[i], where, short_repr), columns=columns,
                                  n_rows=n_rows[i], weight_total=weight[i], dropped_rows=0)
    if rows.taken != rows.total:
        raise bad("the blocks table has blocks of no segment")
    msw = meta["min_segment_weight"]
    if isinstance(msw, bool) or not isinstance(msw, (int, float)) or msw < 0:
        raise bad("min_segment_weight must be a number >= 0")
    table = pd.DataFrame(keys, columns=by) if keys else pd.DataFrame({b: [] for b in by})
    table["n_rows"] = np.asarray(n_rows, dtype=np.int64)
    table["weight"] = np.asarray(weight, dtype=np.float64)
    table["fallback"] = np.asarray(fallback, dtype=bool)
    maps: dict[Key, Any] = {(GLOBAL, None): glob}
    maps.update({(key, None): m for key, m in models.items() if m is not None})
    return KeyedModel(method, maps, by=by, params=params, segments=table,
                      min_segment_weight=float(msw), n_rows=glob.n_rows,
                      weight_total=glob.weight_total, dropped_rows=glob.dropped_rows,
                      columns=columns)

