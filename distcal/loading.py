"""``distcal.load``: any model directory, of this format or distcal 0.1's, from any store."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import ModelError
from .keyed_model import keyed_from_meta
from .legacy import (
    BINARY_FORMAT,
    MULTICLASS_FORMAT,
    SEGMENTED_FORMAT,
    binary_from_meta,
    multiclass_from_meta,
    segmented_from_meta,
)
from .model import build_or_damaged, read_checked_meta, read_model_json
from .model_format import FORMAT, FORMAT_VERSION
from .storage import fetch_dir, filesystem_for

__all__ = ["load", "load_dir"]

# model.json's format -> its version, the kind its messages name, the reader of its
# checked metadata.
_READERS: dict[str, tuple[int, str, Callable[[Path, dict[str, Any]], Any]]] = {
    FORMAT: (FORMAT_VERSION, "keyed ", keyed_from_meta),
    MULTICLASS_FORMAT: (1, "multiclass ", multiclass_from_meta),
    SEGMENTED_FORMAT: (1, "segmented ", segmented_from_meta),
    BINARY_FORMAT: (1, "", binary_from_meta)}


def load_dir(root: Path) -> Any:
    """The model in ``root``, by its model.json: version 2 (:mod:`distcal.model_format`),
    or a 0.1 multiclass, segmented or binary model (:mod:`distcal.legacy`).

    The directory is untrusted input. Only the ``format`` field chooses the
    reader; anything else, or a model.json that cannot be read safely, is
    read as a 0.1 binary model, whose checks say what is wrong. Then the
    format version and checksum are checked, only the regular files the
    format names directly inside ``root`` are read (no other name, no
    symbolic link), and every parameter and table is checked; anything
    inconsistent is a :class:`~distcal.ModelError`. Nothing in the
    directory is executed.
    """
    try:
        fmt = read_model_json(root).get("format")
    except ModelError:
        fmt = None
    if not (isinstance(fmt, str) and fmt in _READERS):  # (a JSON list is no dict key)
        fmt = BINARY_FORMAT
    version, kind, read = _READERS[fmt]
    meta = read_checked_meta(root, fmt, version, kind)
    return build_or_damaged(root, lambda: read(root, meta))


def load(path: str | os.PathLike[str]) -> Any:
    """Read a model directory written by ``save`` (of any model, this version or 0.1).

    ``path`` is a local path or any fsspec URL (copied to a local temporary
    directory first).

    Raises
    ------
    ModelError
        When the directory is missing, not a distcal model, of an unknown
        format version, or damaged (a checksum or a table does not match).
        Nothing in the directory is executed.

    Examples
    --------
    >>> import tempfile, pandas as pd, distcal
    >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
    >>> model = distcal.fit(df)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     model.save(f"{d}/model")
    ...     distcal.load(f"{d}/model") == model
    True
    """
    uri = os.fspath(path)
    fs = filesystem_for(uri)
    if not fs.exists(uri):
        raise ModelError(f"model directory '{uri}' does not exist")
    return fetch_dir(fs, uri, load_dir)
