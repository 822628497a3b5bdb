"""The Spark engine: range partitions by score, the core on Arrow batches.

The modules, in the order data flows through them:

* :mod:`.session`: the session (an embedded one for the command line),
  reading local data into Spark, the number of ranges, Arrow batch size;
* :mod:`.schema`: column types, vectors and their lengths in Spark SQL;
* :mod:`.keyed`: the keyed rows (any key spec) in ranges chosen from the
  data, pooled incrementally in bounded worker memory;
* :mod:`.transform`: applying binary maps (by segment or not) inside the JVM;
* :mod:`.transform_rows`: applying a model to whole rows (one ``mapInArrow``).
"""

from __future__ import annotations

from typing import Any

from ...core.keyed import KeySpec
from .session import as_spark

__all__ = ["SparkEngine"]


class SparkEngine:
    """The Spark engine; implements :class:`~distcal.engines.base.Engine`."""

    name = "spark"
    options = frozenset({"n_ranges", "combine", "sample_rows", "range_rows"})

    def is_vector_column(self, data: Any, name: str) -> bool:
        """An ``ArrayType`` or pyspark.ml ``VectorUDT`` column (local data: as locally)."""
        from ..frames import engine_of

        if engine_of(data) == "local":
            from ...tables import is_vector_column

            return is_vector_column(data, name)
        from pyspark.sql import types as T

        from .schema import fields_of, is_vector_udt

        fields = fields_of(data)
        return name in fields and (isinstance(fields[name], T.ArrayType)
                                   or is_vector_udt(fields[name]))

    def open_keyed(self, data: Any, spec: KeySpec, *, on_invalid: str = "raise",
                   finite_scores: bool = False, passes: int = 1, **opts: Any) -> Any:
        """The keyed rows in score ranges (:class:`.keyed.SparkKeyedRanges`).

        Options: ``range_rows`` (the per-range budget of distinct (key,
        score) pairs, 200k by default: the ranges are the estimated distinct
        pairs over it, at least :func:`.session.default_ranges`),
        ``n_ranges`` (a fixed number of ranges), ``sample_rows`` (keyed rows
        sampled for the bounds). ``combine`` (the map-side combine of 0.1)
        is ignored with a ``FutureWarning``: each range is pooled as it
        streams in.
        """
        import warnings

        from ...core.summary import SummarySource
        from .keyed import SparkKeyedRanges

        if isinstance(data, SummarySource):  # summaries: merged on the cluster
            from .summary_ranges import SparkSummaryRanges

            opts.pop("combine", None)
            return SparkSummaryRanges(data, spec, on_invalid=on_invalid,
                                      finite_scores=finite_scores, passes=passes, **opts)

        if opts.pop("combine", None) is not None:
            warnings.warn("combine is ignored since distcal 0.2 (each range is pooled as its "
                          "rows stream in) and will be refused in a later version",
                          FutureWarning, stacklevel=4)
        return SparkKeyedRanges(as_spark(data), spec, on_invalid=on_invalid,
                                finite_scores=finite_scores, passes=passes, **opts)

    def transform_rows(self, data: Any, columns: dict[str, str], output_col: str,
                       predict: Any, vector: bool, model: Any = None,
                       score_index: int | None = None) -> Any:
        """A Spark DataFrame in, the same out; local data forced onto Spark (a pandas
        DataFrame, a pyarrow Table or a Parquet path) comes back as pandas (Arrow for Arrow).

        A binary map, or binary maps by segment (``model.by``), is applied
        inside the JVM (:mod:`.transform`: Bucketizers, constant arrays and
        broadcast joins, no Python worker), except Venn-Abers' by segment;
        anything else by ``predict`` in one ``mapInArrow``.
        """
        import pyarrow as pa

        from ..frames import engine_of
        from .schema import check_scores
        from .transform_rows import transform_rows

        df, score_col = as_spark(data), next(iter(columns))
        if model is not None and not hasattr(model, "n_classes"):  # a CalibrationModel
            from .transform import transform

            out = transform(model, df, score_col, output_col, score_index)
        elif model is not None and model.by and model.n_classes < 2:
            from .transform import transform_segmented

            out = transform_segmented(model, df, score_col, output_col)
        else:
            if model is not None:  # its reader's DataErrors, before any job
                scores = [c for c, role in columns.items() if role == "score"]
                check_scores(df, scores, vectors=model.n_classes >= 3 and len(scores) == 1)
            out = transform_rows(df, columns, output_col, predict, vector)
        if engine_of(data) == "spark":
            return out
        frame = out.toPandas()
        return pa.Table.from_pandas(frame, preserve_index=False) if isinstance(
            data, pa.Table) else frame
