"""What a command-line backend is: where data comes from and where outputs go.

The commands (:mod:`.commands`) are written once against :class:`Backend`;
the local command line, the Spark job and the Dask job each provide one
(:mod:`.local`, :mod:`.spark`, :mod:`.dask`). Reading the input and writing
the calibrated table are the engine's own; models and reports are small
local directories published through the storage layer
(:mod:`distcal.storage`) on whatever store the backend's paths live.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..defaults import DEFAULTS
from ..errors import DataError, ModelError, ParameterError, UsageError
from ..loading import load_dir
from ..model import CalibrationModel
from ..params import check_distinct_columns
from ..storage import (
    REPORT,
    FileSystem,
    check_regular_input,
    check_target,
    fetch_dir,
    filesystem_for,
    is_local_uri,
    local_path,
    publish_dir,
    publishing_dir,
    refuse_existing,
    refuse_overlap,
    resolve_local,
    within,
)
from ..storage.kinds import visible_files
from ..tables import widens

__all__ = ["Backend", "check_input_files"]


class Backend:
    """Base of the three backends; subclasses give ``read`` and ``apply``."""

    engine = "local"

    # -- where things are -----------------------------------------------------
    def filesystem(self, uri: str) -> FileSystem:
        """The store of ``uri`` for this backend."""
        return filesystem_for(uri)

    def read(self, opts: dict[str, Any]) -> Any:
        """The input as the engine's kind of data."""
        raise NotImplementedError

    def column_names(self, data: Any) -> list[str]:
        """The columns of what :meth:`read` returned (a Spark or Dask DataFrame here)."""
        return [str(c) for c in data.columns]

    def output_name(self, opts: dict[str, Any]) -> str:
        if not opts.get("output"):
            raise UsageError("missing required option(s): --output")
        return str(opts["output"])

    def check_paths(self, opts: dict[str, Any], outputs: Iterable[str]) -> None:
        """Refuse an output that is, lies inside or contains what the command reads.

        What it reads is the input and the model (``--model``); an output (or
        ``--report``) at any spelling of their paths (``./m/../m``, a trailing
        slash, a symbolic link to them) would destroy them, and one inside the
        input would be read by a re-run. Outputs must not overlap each other.
        """
        outputs = [str(o) for o in outputs]
        for out in outputs:
            check_target(self.filesystem(out), out)
        for role in ("input", "model"):
            src = opts.get(role)
            for out in outputs if src else ():
                refuse_overlap(out, str(src), role)
        for i, a in enumerate(outputs):
            for b in outputs[i + 1:]:
                if within(a, b) or within(b, a):
                    raise UsageError(f"outputs '{a}' and '{b}' overlap; give each its own path")

    def refuse_existing(self, target: str, overwrite: bool, table: str | None = None,
                        kind: str | None = None) -> None:
        """Before any work: an existing ``target`` without ``--overwrite``, or one that is
        not a previous output of ``kind`` ("model", "report", "parquet")."""
        fs = self.filesystem(target)
        refuse_existing(fs, resolve_local(target) if fs.local else target, overwrite, kind,
                        shown=target)

    # -- models, reports, summaries, small tables --------------------------------
    def publish(self, path: str, write: Callable[[Any], None], overwrite: bool = False,
                kind: str | None = None) -> None:
        """``write(tmp)`` aside on this backend's store, then commit it as ``path``."""
        publish_dir(self.filesystem(path), path, write, overwrite=overwrite, kind=kind)

    def publishing(self, path: str, overwrite: bool = False, kind: str | None = None
                   ) -> AbstractContextManager[Path]:
        """A local path to write aside, committed as ``path`` on this backend's store
        when the block ends (:func:`~distcal.storage.publish.publishing_dir`)."""
        return publishing_dir(self.filesystem(path), path, overwrite=overwrite, kind=kind)

    def load_model(self, path: str) -> CalibrationModel:
        fs = self.filesystem(path)
        if not fs.exists(path):
            raise ModelError(f"model directory '{path}' does not exist")
        return fetch_dir(fs, path, load_dir)

    def write_report(self, reports: list[Any], path: str, overwrite: bool, *,
                     provenance: dict[str, Any] | None = None, model: Any = None) -> None:
        with self.publishing(path, overwrite, REPORT) as d:
            self.report_files(reports, d, provenance=provenance, model=model)

    def report_files(self, reports: list[Any], d: Path, *,
                     provenance: dict[str, Any] | None = None, model: Any = None) -> None:
        """The report's files in the local directory ``d`` (the engine in its provenance)."""
        from ..report import write_report

        write_report(reports, d, provenance={"engine": self.engine, **(provenance or {})},
                     model=model)

    # -- the calibrated table -------------------------------------------------
    def apply(self, model: CalibrationModel, opts: dict[str, Any],
              before_commit: Callable[[Any], None] | None = None) -> int:
        """Write the calibrated table; ``before_commit(new_data)`` runs before it is published."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the backend started (sessions, clusters)."""


# Past this many files, only the first ones are checked (a footer read each).
_MAX_CHECKED_FILES = 10_000


def check_input_files(command: str, opts: dict[str, Any]) -> None:
    """Refuse a local input that no engine could read, naming the file and the column.

    Every Parquet file of a local input is opened (its footer only): a file
    that is not Parquet (CSV given by mistake), or a column the command reads
    that is not a number or text in some file, or whose type differs from one
    file to the next (a timestamp column in one file), is a
    :class:`~distcal.DataError` with a one-line message, before any engine
    starts. Remote inputs and catalog tables are left to the engine.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..core.columns import arrow_kind, is_list_type

    for group in _roles(command, opts):  # a column given twice: a DataError naming it
        check_distinct_columns({"--" + k.replace("_", "-"): v for k, v in group.items()})
    fmt = opts.get("input_format") or "parquet"
    if fmt != "parquet" and opts.get("engine") != "spark":
        raise UsageError(f"--input-format {fmt} needs the Spark engine (--engine spark); "
                         "the local and Dask engines read Parquet")
    inp = opts.get("input")
    if not inp or not is_local_uri(str(inp)) or opts.get("input_table"):
        return
    path = local_path(str(inp))
    if fmt == "parquet" and not os.path.exists(path):
        return  # each backend says so in its own words
    check_regular_input(path)  # a FIFO or a device would block or never end
    if os.path.exists(os.path.join(path, "summary.json")):
        from ..summary import is_summary_dir

        if is_summary_dir(path):
            raise UsageError(f"--input '{inp}' is a saved summary, not a table of rows: "
                             + ("pass it with --summaries" if command == "fit" else
                                f"{command} reads rows (fit and monitor take summaries "
                                "with --summaries)"))
    if fmt != "parquet":
        return  # Spark's reader checks the rest
    files = visible_files(path, _MAX_CHECKED_FILES) if os.path.isdir(path) else [path]
    if command == "evaluate":  # every prediction's columns, also when none is given
        names = [*(opts.get("prob_col") or []), *(n for v in opts.get("prob_cols") or []
                                                  for n in split_columns(v)),
                 opts.get("label_col"), opts.get("weight_col"),
                 *(interval_columns(opts.get("interval_cols")) or ())]
    else:  # the columns it reads, not those it writes
        names = [n for opt, v in next(_roles(command, opts)).items()
                 if opt not in ("output_col", "interval_cols")
                 for n in (v if isinstance(v, list) else [v])]
    names = [n for n in names if n]
    seen: dict[str, tuple[str, str]] = {}
    rows = 0
    by = [n for n in split_columns(opts.get("by") or "") if n]
    for f in files:
        try:
            meta = pq.read_metadata(f)
            schema = meta.schema.to_arrow_schema()
        except (OSError, ValueError) as exc:
            raise DataError(f"input file '{f}' is not a readable Parquet file: "
                            f"{one_line(exc)[:300]}") from exc
        rows += meta.num_rows
        _check_column_names(schema.names, f)
        for name in by:
            if name in schema.names and _is_nested(schema.field(name).type):
                raise DataError(f"column '{name}' (segment) has type "
                                f"{schema.field(name).type} in input file '{f}'; --by needs "
                                "columns of numbers, text, dates or booleans")
        for name in names:
            if name not in schema.names:
                continue
            t = schema.field(name).type
            if pa.types.is_null(t) or (name == opts.get("score_col")
                                       and opts.get("score_index") is not None) or (
                    command in ("fit", "apply") and name == opts.get("score_col")
                    and is_list_type(t)) or (
                    command == "evaluate" and name in (opts.get("prob_col") or [])
                    and is_list_type(t)):
                continue  # vectors: the engine checks their element type
            if arrow_kind(t) == "other":
                raise DataError(f"column '{name}' has type {t} in input file '{f}'; expected "
                                "numbers")
            # As the readers: the first file's type, to which the others must widen
            # exactly (int32 to int64, float32 to float64, string to large_string).
            first = seen.setdefault(name, (t, f))
            if first[0] != t and not widens(t, first[0]):
                raise DataError(f"column '{name}' has type {t} in input file '{f}' but "
                                f"{first[0]} in '{first[1]}'; every file of the input must "
                                "have the first file's column types, or types that widen "
                                "exactly to them: the input is read in its first file's "
                                "types" + (", here the narrower" if widens(first[0], t)
                                           else ""))
    _check_bins_against_rows(command, opts, rows, complete=len(files) < _MAX_CHECKED_FILES)


def _check_bins_against_rows(command: str, opts: dict[str, Any], rows: int,
                             complete: bool) -> None:
    """``--n-bins`` above the input's rows (its footers' counts), before anything is read.

    As the API: a histogram fit refuses more bins than rows; an evaluation more
    bins than rows when that is also more than the default 10.
    """
    n_bins = opts.get("n_bins")
    if not complete or not isinstance(n_bins, int) or n_bins <= rows:
        return
    if (command == "fit" and opts.get("method") == "histogram") or (
            command == "evaluate" and n_bins > DEFAULTS.n_bins):
        raise ParameterError(f"n_bins must not exceed the number of rows ({rows}), got "
                             f"{n_bins}")


def _check_column_names(names: list[str], f: str) -> None:
    """A file whose columns repeat a name cannot be read by column name: refuse it."""
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DataError(f"input file '{f}' has {len(dup)} column name(s) used twice or more: "
                        f"{', '.join(repr(d) for d in dup[:5])}; give each column its own name")


def _roles(command: str, opts: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The columns ``command`` is given, by option (None: not in play): a mapping for each
    prediction ``evaluate`` compares, one for any other command. Within a mapping, a
    column plays one role once (``--prob-cols p0,p0,p1`` and ``--label-col score`` are
    refused)."""
    label = opts.get("label_col")
    weight = opts.get("weight_col")
    if command == "evaluate":
        for value in opts.get("prob_cols") or []:
            yield dict(prob_cols=split_columns(value), label_col=label, weight_col=weight)
        interval = list(interval_columns(opts.get("interval_cols")) or ()) or None
        for col in opts.get("prob_col") or []:
            yield dict(prob_col=col, label_col=label, weight_col=weight, interval_cols=interval)
    elif command == "apply":
        report = bool(opts.get("report"))
        # Only what was given: the model (not loaded yet) may read other score columns,
        # and its transform refuses an output column its input has.
        yield dict(score_col=_score_role(opts),
                   output_col=opts.get("output_col"),
                   label_col=label if report else None, weight_col=weight if report else None,
                   interval_cols=list(interval_columns(opts.get("interval_cols")) or ()) or None)
    elif command == "threshold":
        yield dict(score_col=opts.get("score_col"),
                   label_col=None if opts.get("loss_col") else label, weight_col=weight,
                   loss_col=opts.get("loss_col"))
    elif command == "discretize":
        yield dict(score_col=opts.get("score_col"), label_col=label)
    else:
        yield dict(score_col=_score_role(opts), label_col=label, weight_col=weight)


def transform_for_cli(model: Any, data: Any, opts: dict[str, Any]) -> Any:
    """``model.transform`` of ``data`` with the command line's column options."""
    from ..keyed_model import KeyedModel

    interval = interval_columns(opts.get("interval_cols"))
    if isinstance(model, KeyedModel):
        if interval is not None and model.n_classes >= 2:
            raise UsageError("--interval-cols is for a Venn-Abers model of one binary score; "
                             "this model is multiclass")
        if opts.get("score_index") is not None:
            raise UsageError("--score-index reads one element as a binary score; this model "
                             f"is {'multiclass' if model.n_classes >= 2 else 'per segment'}")
        cols = column_list(opts.get("score_cols"), "score-cols")
        return model.transform(data, score_col=None if cols else opts["score_col"],
                               score_cols=cols, output_col=opts["output_col"],
                               interval_cols=interval)
    if opts.get("score_cols"):
        raise UsageError("--score-cols is for a multiclass model; this one is binary")
    return model.transform(data, score_col=opts["score_col"], output_col=opts["output_col"],
                           score_index=opts.get("score_index"), interval_cols=interval)


def split_columns(value: Any) -> list[str]:
    """Comma-separated column names (``--by a,b``), each stripped, empty ones kept.

    The checks made before a command runs skip empty names; the command
    refuses them with :func:`checked_columns`.
    """
    return [n.strip() for n in str(value).split(",")]


def checked_columns(value: Any, option: str, least: int = 1, most: int | None = None
                    ) -> list[str]:
    """The column names of ``--option`` (comma-separated); a UsageError naming the option
    for an empty name, or for fewer than ``least`` or more than ``most`` names."""
    names = split_columns(value)
    if all(names) and len(names) >= least and (most is None or len(names) <= most):
        return names
    if least == most == 2:
        expected = "two column names separated by a comma"
    elif least == 2:
        expected = "two or more column names separated by commas"
    else:
        expected = "column names separated by commas"
    raise UsageError(f"--{option} must be {expected}, got {value!r}")


def interval_columns(value: str | None) -> tuple[str, str] | None:
    """``--interval-cols p0,p1`` as a pair of names (None without the option)."""
    if value is None:
        return None
    p0, p1 = checked_columns(value, "interval-cols", least=2, most=2)
    return p0, p1


def column_list(value: str | list[str] | None, option: str) -> list[str] | None:
    """``--score-cols a,b,c`` or ``--by a,b`` as a list of names (None without the option;
    a list, e.g. a model's own columns, as it is)."""
    if isinstance(value, list):
        return value
    return None if value is None else checked_columns(value, option)


def _score_role(opts: dict[str, Any]) -> Any:
    """The score column(s) of fit and apply: --score-cols when given, else --score-col."""
    return column_list(opts.get("score_cols"), "score-cols") or opts.get("score_col")


def _is_nested(t: Any) -> bool:
    """Structs, lists, maps, unions: values that cannot key a segment."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(pa.types.is_nested(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t))


def one_line(exc: BaseException) -> str:
    """The message's first line; for a Spark worker's failure, the worker's own exception.

    Spark's ``PythonException`` starts with "An exception was thrown from
    the Python worker" and carries the worker's traceback below; the line
    that says what happened (e.g. ``ModuleNotFoundError: No module named
    'distcal'``) is the last "...Error: ..." line of it.
    """
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if "Python worker" in first:
        from ..engines.spark.session import worker_error

        cause = worker_error(exc)
        if cause:
            return f"{first.rstrip(': ')}: {cause}"
    return first
