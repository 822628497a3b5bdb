"""The local engine: this process, in-memory frames or Parquet read in batches.

The same pipeline as the cluster engines with the shuffle done in one
process (:mod:`.local_keyed`): each record batch is validated and pooled by
(key, score), the pooled tables are merged, spilling sorted runs to disk
past a memory budget, and the methods run over the ordered score ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.keyed import KeySpec

__all__ = ["LocalEngine"]


class LocalEngine:
    """The local engine (see the module docstring); implements :class:`~.base.Engine`."""

    name = "local"
    options = frozenset({"memory_rows", "batch_rows", "chunk_rows"})

    def is_vector_column(self, data: Any, name: str) -> bool:
        """A pyarrow list column, or a pandas column of lists or arrays (first value)."""
        from ..tables import is_vector_column

        return is_vector_column(data, name)

    def open_keyed(self, data: Any, spec: KeySpec, *, on_invalid: str = "raise",
                   finite_scores: bool = False, passes: int = 1, **opts: Any) -> Any:
        """The keyed rows of a local input, streamed in batches (:mod:`.local_keyed`).

        Options: ``memory_rows`` (distinct (key, score) pairs held before
        spilling sorted runs to disk; default 2^23, or the (key, score) pairs
        of a larger frame in memory), ``batch_rows`` (rows read at a time;
        default 2^20, or all the rows of a frame in memory);
        ``chunk_rows`` is accepted for the binary fit's sake. With ``passes``
        > 1 an in-memory frame's checked rows are kept between passes over
        the rows.
        """
        from .local_keyed import LocalKeyedRanges

        return LocalKeyedRanges(data, spec, on_invalid=on_invalid, finite_scores=finite_scores,
                                passes=passes, **opts)

    def transform_rows(self, data: Any, columns: dict[str, str], output_col: str,
                       predict: Callable[[Any], Any], vector: bool, model: Any = None,
                       score_index: int | None = None) -> Any:
        """pandas in, pandas out; pyarrow in, pyarrow out; a Parquet path in, pandas out."""
        from .local_keyed import transform_rows

        return transform_rows(data, columns, output_col, predict, vector)
