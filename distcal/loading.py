"""``distcal.load``: any model directory, of this format or distcal 0.1's, from any store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import ModelError
from .keyed_model import load_keyed
from .legacy import (
    MULTICLASS_FORMAT,
    SEGMENTED_FORMAT,
    load_binary,
    load_multiclass,
    load_segmented,
)
from .model import read_model_json
from .model_format import FORMAT
from .storage import fetch_dir, filesystem_for

__all__ = ["load", "load_dir"]


def load_dir(root: Path) -> Any:
    """The model in ``root``, by its model.json: version 2 (:mod:`distcal.model_format`),
    or a 0.1 multiclass, segmented or binary model (:mod:`distcal.legacy`).

    Only the ``format`` field decides; the loader validates everything. A
    model.json that cannot be read safely is left to the binary loader to report.
    """
    try:
        fmt = read_model_json(root).get("format")
    except ModelError:
        fmt = None
    if fmt == FORMAT:
        return load_keyed(root)
    if fmt == MULTICLASS_FORMAT:
        return load_multiclass(root)
    if fmt == SEGMENTED_FORMAT:
        return load_segmented(root)
    # Anything else is read as a 0.1 binary model, whose reader says what is wrong.
    return load_binary(root)


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
