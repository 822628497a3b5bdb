"""MLflow flavours of a calibration model: ``python_function`` and ``distcal``.

:func:`save_model` writes an MLflow model directory::

    MLmodel            flavours "python_function" (loader: this module) and "distcal"
    model/             the distcal model directory (model.json + Parquet, no pickle)
    requirements.txt   distcal and what its prediction imports
    input_example.json, serving_input_example.json

``mlflow.pyfunc.load_model(uri).predict(df)`` returns the calibrated
probabilities of ``df``'s score column (the fit's ``score_col``, or its
``score_cols`` for a multiclass model), each row in its segment (the ``by``
columns of ``df``) for a segmented model: a float array (n,) for a binary
model, (n, K) for a multiclass one; exactly ``model.predict``.
``mlflow.pyfunc.spark_udf`` runs the same code on Spark executors.
:func:`load_model` gives back the :class:`~distcal.CalibrationModel` or
:class:`~distcal.KeyedModel` itself. The signature (score and ``by``
columns in, probabilities out) and an input example are recorded.

Writing is atomic (the directory is written aside and committed into place
by :mod:`distcal.storage`); an existing path is refused, as MLflow's own
``save_model`` does. The model directory is read as any distcal model: as
untrusted input, nothing in it executed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .core.piecewise import is_keyed
from .keyed_model import key_kind
from .loading import load as _load_dir
from .storage import OutputExistsError, filesystem_for, publish_dir

__all__ = ["FLAVOR_NAME", "save_model", "log_model", "load_model", "example_input",
           "predict_frame", "write_model_dir"]

FLAVOR_NAME = "distcal"
MODEL_SUBDIR = "model"


def _score_columns(model: Any) -> list[str]:
    """The columns predict reads from the input frame: the scores, then the keys."""
    cols = model.columns
    if is_keyed(model) and model.n_classes >= 2:
        scores = cols.get("scores") or [cols.get("score") or "score"]
    else:
        scores = [cols.get("score") or "score"]
    return [str(c) for c in scores]


def predict_frame(model: Any, df: pd.DataFrame) -> np.ndarray:
    """``model``'s probabilities for the rows of ``df`` (its score and ``by`` columns)."""
    scores = _score_columns(model)
    if not is_keyed(model):
        if scores[0] not in df.columns:
            from .errors import column_not_found

            raise column_not_found(scores[0], "score", map(str, df.columns))
        from .core.rows import read_score  # text: a DataError naming the column and rows

        out: np.ndarray = model.predict(read_score(df, scores[0]))
        return out
    # Per-class score columns (one of them: a binary temperature model's logit), or one
    # column (a vector column, or K = 2's score of class 1).
    multi = model.n_classes >= 2 and bool(model.columns.get("scores"))
    out = model.predict_part(df, None if multi else scores[0], scores if multi else None)
    return out


def example_input(model: Any, rows: int = 5) -> pd.DataFrame:
    """A small input frame for ``model``: scores across its fitted range and a fitted key."""
    lo, hi = 0.0, 1.0
    glob = model.global_model if is_keyed(model) and model.by else model
    base = glob.class_model(glob.n_classes - 1) if is_keyed(glob) and glob.method != \
        "temperature" else glob
    if not is_keyed(base) and base.method not in ("sigmoid", "beta", "venn_abers"):
        b = base.blocks
        finite = np.concatenate([b["score_min"], b["score_max"]])
        finite = finite[np.isfinite(finite)]
        if finite.shape[0]:
            lo, hi = float(finite.min()), float(finite.max())
    s = np.linspace(lo, hi, rows)
    frame: dict[str, Any] = {c: s for c in _score_columns(model)}
    if is_keyed(model) and model.n_classes >= 2 and not model.columns.get("scores"):
        # one vector column of K scores per row
        frame = {c: [np.full(model.n_classes, v) for v in s] for c in frame}
    if is_keyed(model) and model.by:
        seg = model.segments
        first = seg.iloc[0] if len(seg) else None
        for c in model.by:
            frame[c] = [None if first is None else first[c]] * rows
    return pd.DataFrame(frame)


class _PyFuncModel:
    """What ``mlflow.pyfunc.load_model`` wraps: ``predict(df)`` -> probabilities."""

    def __init__(self, model: Any):
        self.model = model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> np.ndarray:
        df = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        return predict_frame(self.model, _dates_back(self.model, df))

    def get_raw_model(self) -> Any:
        return self.model


def _dates_back(model: Any, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the ``by`` columns of a model keyed by dates as dates again.

    MLflow's signature has one type for dates and timestamps: its schema
    enforcement hands pyfunc a column of dates as datetime64, which a model of
    date keys refuses (a timestamp is not a date). Naive midnights only: a
    time of day is not a date, and stays the model's DataError.
    """
    for b in model.by if is_keyed(model) else ():
        col = df.get(b)
        if col is None or not pd.api.types.is_datetime64_dtype(col.dtype):
            continue
        if {key_kind(v) for v in model.segments[b].tolist()} - {None} == {"date"} and bool(
                (col.dropna() == col.dropna().dt.normalize()).all()):
            df = df.assign(**{b: col.dt.date})
    return df


def _load_pyfunc(path: str) -> _PyFuncModel:
    """MLflow's ``python_function`` loader (``loader_module``): ``path`` is ``model/``."""
    return _PyFuncModel(_load_dir(path))


def _requirements() -> str:
    import pyarrow
    import scipy

    from .version import __version__

    return "\n".join([f"distcal=={__version__}", f"numpy=={np.__version__}",
                      f"pandas=={pd.__version__}", f"pyarrow=={pyarrow.__version__}",
                      f"scipy=={scipy.__version__}"]) + "\n"


def save_model(model: Any, path: str | os.PathLike[str], *, mlflow_model: Any = None,
               signature: Any = None, input_example: pd.DataFrame | None = None,
               metadata: dict[str, Any] | None = None) -> None:
    """Write ``model`` as an MLflow model directory at ``path`` (local or an fsspec URL).

    Parameters
    ----------
    model : CalibrationModel or KeyedModel
    path : str or path
        Must not exist: written aside, then committed into place atomically.
    mlflow_model : mlflow.models.Model, optional
        The MLmodel to fill (given by ``mlflow.models.Model.log``).
    signature : mlflow.models.ModelSignature, optional
        Default: inferred from ``input_example`` and its predictions.
    input_example : pandas.DataFrame, optional
        Default: :func:`example_input` of the model.
    metadata : dict, optional
        Free key-value metadata kept in the MLmodel file (the model's
        ``metadata``).
    """
    target = os.fspath(path)

    def write(tmp: Path) -> None:
        write_model_dir(model, tmp, mlflow_model=mlflow_model, signature=signature,
                        input_example=input_example, metadata=metadata)

    try:
        publish_dir(filesystem_for(target), target, write)
    except OutputExistsError as e:  # MLflow's savers have no overwrite either
        raise OutputExistsError(e.target, "choose a new path, or remove this one") from None


def _with_nullable_keys(model: Any, signature: Any) -> Any:
    """``signature`` with the integer and boolean ``by`` columns of any type (MLflow's
    ``AnyType``).

    MLflow's schema enforcement refuses a null in a column typed ``long`` or
    ``boolean`` (pandas holds an integer column with a null as floats, or as the
    nullable Int64, and booleans with a null as the nullable ``boolean``),
    and a ``double`` refuses int64; a null or unseen key is served by the
    global map, so the key column is passed through as it comes.
    """
    from mlflow.types import DataType
    from mlflow.types.schema import AnyType, ColSpec, Schema

    inputs = signature.inputs
    if not (is_keyed(model) and model.by) or inputs is None:
        return signature
    by = set(model.by)
    cols = [ColSpec(AnyType(), c.name)
            if c.name in by and c.type in (DataType.long, DataType.integer, DataType.boolean)
            else c
            for c in inputs.inputs]
    signature.inputs = Schema(cols)
    return signature


def write_model_dir(model: Any, tmp: Path, *, mlflow_model: Any = None, signature: Any = None,
                    input_example: pd.DataFrame | None = None,
                    metadata: dict[str, Any] | None = None) -> None:
    """Write the MLflow model directory into the new local directory ``tmp``."""
    from mlflow.models import Model, infer_signature
    from mlflow.models.model import MLMODEL_FILE_NAME
    from mlflow.models.utils import _save_example
    from mlflow.pyfunc import add_to_model

    from .version import __version__

    mlflow_model = Model() if mlflow_model is None else mlflow_model
    example = example_input(model) if input_example is None else input_example
    if signature is None:
        signature = _with_nullable_keys(model, infer_signature(example,
                                                               predict_frame(model, example)))
    tmp.mkdir()
    model.save(tmp / MODEL_SUBDIR)
    _save_example(mlflow_model, example, str(tmp))
    mlflow_model.signature = signature
    if metadata is not None:
        mlflow_model.metadata = metadata
    (tmp / "requirements.txt").write_text(_requirements())
    add_to_model(mlflow_model, loader_module="distcal.mlflow", data=MODEL_SUBDIR)
    mlflow_model.add_flavor(FLAVOR_NAME, distcal_version=__version__, data=MODEL_SUBDIR,
                            method=model.method, score_columns=_score_columns(model),
                            by=list(model.by) if is_keyed(model) else [])
    mlflow_model.save(str(tmp / MLMODEL_FILE_NAME))


def log_model(model: Any, name: str, *, registered_model_name: str | None = None,
              signature: Any = None, input_example: pd.DataFrame | None = None,
              metadata: dict[str, Any] | None = None) -> Any:
    """Log ``model`` to the active MLflow run (or a new one) as the logged model ``name``.

    Parameters
    ----------
    model : CalibrationModel or KeyedModel
    name : str
        Name of the logged model.
    registered_model_name : str, optional
        Also register it as a new version of this registered model (created
        if it does not exist). Default: not registered.
    signature, input_example, metadata
        As for :func:`save_model` (default: the signature inferred from
        :func:`example_input` and its predictions; no metadata).

    Returns
    -------
    mlflow.models.model.ModelInfo
        Its ``model_uri`` loads the model back (:func:`load_model`).
    """
    from mlflow.models import Model

    return Model.log(artifact_path=None, name=name, flavor=sys.modules[__name__],
                     registered_model_name=registered_model_name, model=model,
                     signature=signature, input_example=input_example, metadata=metadata)


def load_model(model_uri: str, dst_path: str | None = None) -> Any:
    """The distcal model of an MLflow model (``runs:/...``, ``models:/...``, a path).

    Reads the ``distcal`` flavour's model directory with :func:`distcal.load`.
    ``dst_path``: an existing local directory to download the model's
    artifacts into (default: None, a new temporary directory; a local
    model is read in place).
    """
    from mlflow.exceptions import MlflowException
    from mlflow.models import Model
    from mlflow.models.model import MLMODEL_FILE_NAME
    from mlflow.tracking.artifact_utils import _download_artifact_from_uri

    local = _download_artifact_from_uri(artifact_uri=model_uri, output_path=dst_path)
    conf = Model.load(os.path.join(local, MLMODEL_FILE_NAME)).flavors.get(FLAVOR_NAME)
    if conf is None:
        raise MlflowException(f"the model at {model_uri!r} has no {FLAVOR_NAME!r} flavour")
    return _load_dir(os.path.join(local, conf["data"]))
