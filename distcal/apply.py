"""Applying a model to a Parquet table in bounded memory."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .core.columns import arrow_kind, vector_element
from .core.rows import InvalidRowsError, read_score
from .core.validate import check_vector_lengths
from .engines.base import check_transform_columns, prediction_array
from .errors import VECTORS_EXPECTED, ParameterError, column_type
from .keyed_model import KeyedModel
from .model import CalibrationModel, check_interval_columns
from .storage import PARQUET, filesystem_for, publishing_dir, refuse_overlap
from .tables import iter_tables, open_dataset

__all__ = ["apply_to_parquet"]


def apply_to_parquet(model: CalibrationModel | KeyedModel, source: str | os.PathLike,
                     output: str | os.PathLike, *, score_col: str = "score",
                     output_col: str = "calibrated", overwrite: bool = False,
                     batch_rows: int = 1 << 20, score_index: int | None = None,
                     score_cols: list[str] | None = None,
                     interval_cols: tuple[str, str] | None = None,
                     before_commit: Callable[[Path], None] | None = None) -> int:
    """Stream ``source`` batch by batch, add ``output_col``, write one Parquet file.

    Every input column is kept (hive partition columns included). The file
    is written aside and renamed, so ``output`` is never half-written, and
    never is, lies inside or contains ``source`` (a :class:`~distcal.DataError`);
    ``before_commit(path_of_the_new_file)`` runs in between (a report on the
    output: if it raises, nothing is published). Returns the rows written.
    With ``score_index`` the score is that element of the vectors in
    ``score_col``; their lengths are checked over the whole input before
    the output is published. A :class:`~distcal.KeyedModel` reads its
    scores (``score_col``, a vector column, or ``score_cols``) and its
    segment columns from each batch; a multiclass one writes a
    ``list<double>`` column. ``interval_cols=("p0", "p1")`` (a Venn-Abers
    model of a column of numbers) also writes the interval of
    :meth:`~distcal.CalibrationModel.predict_interval`, as
    ``model.transform`` does.
    """
    check_interval_columns(model, interval_cols, output_col, score_index)
    if isinstance(model, KeyedModel) and score_index is not None:
        raise ParameterError("score_index reads an element of a vector score, for a binary "
                             "model; a multiclass model reads the whole vector (score_col) "
                             "and a per-segment one a column of numbers")
    refuse_overlap(os.fspath(output), os.fspath(source))
    dataset = open_dataset(source)
    schema = dataset.schema
    lengths: Counter[int] = Counter()
    predict: Callable[[pa.Table], np.ndarray]
    if isinstance(model, KeyedModel):
        vector_col, score_cols = model.score_inputs(score_col, score_cols)
        inputs = {**dict.fromkeys(score_cols or [str(vector_col)], "score"),
                  **dict.fromkeys(model.by, "segment")}

        def predict(table: pa.Table) -> np.ndarray:
            if interval_cols is not None:  # p, p0, p1
                return np.stack([model.predict_part(table, vector_col, score_cols, interval=j)
                                 for j in (None, 0, 1)])
            return model.predict_part(table, vector_col, score_cols)
    else:
        inputs = {score_col: "score"}
        kind = arrow_kind(schema.field(score_col).type) if score_col in schema.names else None
        if kind == "other" and score_index is None:
            raise column_type(score_col, "score", str(schema.field(score_col).type))
        if kind not in (None, "other") and score_index is not None:
            raise column_type(score_col, "score", str(schema.field(score_col).type),
                              VECTORS_EXPECTED)

        def predict(table: pa.Table) -> np.ndarray:
            if score_index is None:  # text cells: a DataError, as model.transform says
                s = read_score(table, score_col)
                if interval_cols is not None:  # p, p0, p1
                    return np.stack([model.predict(s), *model.predict_interval(s)])
                return model.predict(s)
            scores, seen = vector_element(table.column(score_col), score_index, score_col)
            lengths.update(seen)
            return model.predict(scores)
    added = [output_col, *(interval_cols or ())]
    check_transform_columns(schema.names, inputs, *added)
    keep = list(schema.names)
    vector = isinstance(model, KeyedModel) and model.n_classes >= 2
    out_type = pa.list_(pa.float64()) if vector else pa.float64()
    out_schema = pa.schema([schema.field(n) for n in keep]
                           + [pa.field(n, out_type) for n in added])
    rows = 0
    target = os.fspath(output)
    with publishing_dir(filesystem_for(target), target, overwrite=overwrite,
                        kind=PARQUET) as tmp:
        with pq.ParquetWriter(tmp, out_schema) as writer:
            tables = iter_tables(dataset, keep, batch_rows)
            for table in tables:
                try:
                    values = predict(table)
                except InvalidRowsError as found:  # refused: count the rows of the whole input
                    for rest in tables:
                        try:
                            predict(rest)
                        except InvalidRowsError as more:
                            found = found.plus(more)
                    raise found from None
                # p, p0, p1 with interval_cols; one list of K probabilities per row (vector)
                new = [prediction_array(v, False) for v in values] if interval_cols is not None \
                    else [prediction_array(values, vector)]
                writer.write_table(pa.Table.from_arrays(
                    [table.column(n) for n in keep] + new, schema=out_schema))
                rows += table.num_rows
        if score_index is not None:
            check_vector_lengths(score_col, "score", score_index, lengths)
        if before_commit is not None:
            before_commit(tmp)
    return rows
