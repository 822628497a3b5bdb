"""The command-line options, declared once: the parser and the YAML config checks use them.

Each option has a type, a help text that states its default, the
subcommands it belongs to, and the entry points that offer it (the
``distcal`` command, the Spark job, the Dask job). Options from a YAML file
(``--config``) are checked against the same declarations, so
``overwrite: "false"`` is an error, not ``True``.
"""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass
from typing import Any

from ..defaults import DEFAULTS, INTERPOLATIONS, METHOD_PARAMS, METHODS, STRATEGIES
from ..engines import ENGINES
from ..errors import UsageError
from ..export.sql import DIALECTS
from ..storage import read_regular_file

__all__ = ["Option", "OPTIONS", "COMMANDS", "add_options", "load_config", "resolve_options"]

COMMANDS = ("fit", "apply", "evaluate", "threshold", "discretize", "export", "summarize",
            "monitor")
# the commands that read data (export reads a model only, monitor summaries only)
ALL = ("fit", "apply", "evaluate", "threshold", "discretize", "summarize")
CLI, SPARK_JOB, DASK_JOB = "distcal", "spark", "dask"
EVERYWHERE = (CLI, SPARK_JOB, DASK_JOB)

EXPORT_FORMATS = ("sql", "onnx", "mlflow")

# A config file larger than this is refused: options fit in a few lines.
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class Option:
    """One command-line option (``--name``) and what its value may be."""

    name: str
    kind: type
    help: str
    commands: tuple[str, ...] = ALL
    choices: tuple[Any, ...] | None = None
    repeat: bool = False
    entry_points: tuple[str, ...] = EVERYWHERE
    default: Any = None  # shown in the help and used when neither command line nor config give it
    many: bool = False  # one or more values after the option (--summaries A B C)

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option("config", str, "YAML file of defaults for this command's options (keys: long "
           "option names); the command line wins; a key that is not an option of this "
           "command is an error; a calibration method's parameters apply only when that "
           "method is fitted (default: none)", commands=("fit",)),
    Option("config", str, "YAML file of defaults for this command's options (keys: long "
           "option names); the command line wins; a key that is not an option of this "
           "command is an error (default: none)",
           commands=tuple(c for c in COMMANDS if c != "fit")),
    Option("engine", str, f"where to run (default: {DEFAULTS.cli_engine})", choices=ENGINES,
           entry_points=(CLI,), default=DEFAULTS.cli_engine, commands=(*ALL, "monitor")),
    Option("input", str, "input: a Parquet file or dataset directory, any path the engine "
           "reads (required)"),
    Option("input-format", str, "format of --input: parquet, or with the Spark engine also "
           "csv (with a header line; column types inferred), json (one object per line), orc "
           "(default: parquet)", choices=("parquet", "csv", "json", "orc"),
           entry_points=(CLI, SPARK_JOB), default="parquet"),
    Option("input-table", str, "read this catalog table instead of --input (default: none)",
           entry_points=(SPARK_JOB,)),
    Option("output", str, "model directory to write (required)", commands=("fit",)),
    Option("output", str, "Parquet output to write: the input's columns plus --output-col "
           "(required)", commands=("apply",)),
    Option("output", str, "report directory to write: report.json, report.html, PNGs (required)",
           commands=("evaluate",)),
    Option("output-table", str, "write this catalog table instead of --output (default: none)",
           commands=("apply",), entry_points=(SPARK_JOB,)),
    Option("model", str, "model directory written by 'fit' (required)",
           commands=("apply", "export")),
    Option("format", str, "what to write: sql (a SQL expression, one line per output), onnx "
           "(an ONNX model file), mlflow (an MLflow model directory) (required)",
           commands=("export",), choices=EXPORT_FORMATS),
    Option("dialect", str, "SQL dialect of --format sql (default: spark)", commands=("export",),
           choices=DIALECTS, default="spark"),
    Option("output", str, "file (sql, onnx) or directory (mlflow) to write; an existing path "
           "is never replaced (required)", commands=("export",)),
    Option("score-col", str, "--format sql: SQL expression of the score, usually a column "
           "(default: the fit's score column)", commands=("export",)),
    Option("score-cols", str, "--format sql, multiclass: the K per-class score expressions, "
           "comma-separated (default: the fit's score columns)", commands=("export",)),
    Option("method", str, f"calibration method; temperature is for multiclass scores (default: "
           f"{DEFAULTS.method})", commands=("fit",),
           choices=(*METHODS, "temperature"), default=DEFAULTS.method),
    Option("output", str, "also write the intervals as a Parquet file (default: only the "
           "JSON line)", commands=("discretize",)),
    # A command's help lists its options in this tuple's order: summarize's own
    # (calibration history, docs/history.md) come before the columns it shares.
    Option("output", str, "summary directory to write: summary.json + table.parquet "
           "(required)", commands=("summarize",)),
    Option("period", str, "label kept with the summary, e.g. the date 2026-12-03 (default: "
           "none)", commands=("summarize",)),
    Option("decimals", int, "round the scores to this many decimals first: a smaller "
           "summary, exact for the rounded scores (default: none, no rounding)",
           commands=("summarize",)),
    Option("score-col", str, f"score column (default: {DEFAULTS.score_col})",
           commands=("fit", "threshold", "discretize", "summarize"),
           default=DEFAULTS.score_col),
    Option("score-col", str, f"score column, or a vector (list) column of a multiclass "
           f"model's K scores (default: {DEFAULTS.score_col}; a model fitted on per-class "
           "columns reads those, as --score-cols)", commands=("apply",)),
    Option("score-cols", str, "multiclass scores given as K per-class columns, comma-separated "
           "(e.g. s0,s1,s2; labels are the class indices 0..K-1), instead of --score-col; a "
           "--score-col of vectors (lists) is multiclass too (default: none)",
           commands=("fit", "apply")),
    Option("score-index", int, "read element i (0-based) of the vectors/arrays in --score-col "
           "as the score, e.g. 1 for a pyspark.ml classifier's probability column (default: "
           "none, the column holds numbers)", commands=("fit", "apply", "threshold")),
    Option("prob-col", str, f"probability column, or a vector (list) column of K class "
           f"probabilities for a multiclass report; repeat to compare several (default: "
           f"{DEFAULTS.prob_col}, or {DEFAULTS.output_col}, what 'apply' writes, in an input "
           f"without {DEFAULTS.prob_col}; none when per-class columns are given)",
           commands=("evaluate",), repeat=True),
    Option("prob-cols", str, "one multiclass prediction given as K per-class probability "
           "columns, comma-separated (e.g. p0,p1,p2; labels are the class indices 0..K-1); "
           "repeat to compare several (default: none)", commands=("evaluate",), repeat=True),
    Option("label-col", str, f"label column: 0/1 or rates in [0, 1] (default: "
           f"{DEFAULTS.label_col})", default=DEFAULTS.label_col,
           commands=("fit", "evaluate", "threshold", "summarize")),
    Option("label-col", str, f"with --report: the label column the report evaluates (0/1 or "
           f"rates in [0, 1]; default: {DEFAULTS.label_col})", default=DEFAULTS.label_col,
           commands=("apply",)),
    Option("label-col", str, f"class label column: any labels, numbers or strings, each "
           f"value a class (default: {DEFAULTS.label_col})", commands=("discretize",),
           default=DEFAULTS.label_col),
    Option("max-classes", int, "most distinct labels discretize accepts: more is refused "
           "(exit 2) before any count is made; each class is a count column of the output "
           "(default: 100)", commands=("discretize",), default=100),
    # Not for discretize: MODL counts rows (unit weights), and a weight column
    # it would ignore must not be accepted.
    Option("weight-col", str, "row weight column (default: none, every weight 1)",
           commands=("fit", "evaluate", "threshold", "summarize")),
    Option("weight-col", str, "with --report: the row weight column of the report (default: "
           "none, every weight 1)", commands=("apply",)),
    Option("loss-col", str, "per-row loss of predicting positive, instead of labels and "
           "costs (default: none)", commands=("threshold",)),
    Option("output-col", str, f"column to add (default: {DEFAULTS.output_col})",
           commands=("apply",), default=DEFAULTS.output_col),
    Option("interval-cols", str, "a Venn-Abers model: also write its interval (p0, p1) as these "
           "two columns, comma-separated, e.g. p0,p1 (default: none)", commands=("apply",)),
    Option("interval-cols", str, "two columns holding an interval per row, comma-separated "
           "(p0,p1, as apply --interval-cols writes them): the report adds the distribution "
           "of the widths p1 - p0 (default: none)", commands=("evaluate",)),
    Option("report", str, "also write the evaluation report of --output-col to this "
           "directory, beside the raw score's when the model was fitted on scores in [0, 1] "
           "(isotonic, histogram or MODL; needs the label column; default: none)",
           commands=("apply",)),
    Option("increasing", str, "isotonic: direction of the map (default: true)",
           commands=("fit",), choices=("true", "false", "auto")),
    Option("interpolation", str, "isotonic: between blocks (default: linear)",
           commands=("fit",), choices=INTERPOLATIONS),
    Option("y-min", float, "isotonic: lower bound of the fitted values (default: none)",
           commands=("fit",)),
    Option("y-max", float, "isotonic: upper bound of the fitted values (default: none)",
           commands=("fit",)),
    Option("by", str, "fit one map per value of these columns (comma-separated), plus the "
           "global map (default: none, one map)", commands=("fit",)),
    Option("by", str, "also report each value of these columns (comma-separated): a "
           "table of segments, worst calibrated first, and their reliability curves "
           "(default: none)", commands=("evaluate",)),
    Option("by", str, "also find the optimal threshold of each value of these columns "
           "(comma-separated): each segment's threshold, cost and confusion counts under "
           "\"segments\" in the JSON line (default: none, one threshold)",
           commands=("threshold",)),
    Option("by", str, "also summarise each value of these columns (comma-separated), so "
           "that fits from the summary have one map per value (default: none)",
           commands=("summarize",)),
    Option("min-segment-weight", float, "with --by: segments of less total weight use the "
           "global map (default: 0)", commands=("fit",), default=0.0),
    Option("n-bins", int, f"histogram / calibration-curve bins (default: {DEFAULTS.n_bins})",
           commands=("fit", "evaluate")),
    Option("max-groups", int, "modl: the most groups of equal-count score ranges a key's "
           f"scores are put in before the search (default: "
           f"{METHOD_PARAMS['modl']['max_groups']})", commands=("fit", "discretize")),
    Option("strategy", str, f"bin edges (default: {DEFAULTS.strategy})",
           commands=("fit", "evaluate"), choices=STRATEGIES),
    Option("threshold", float, f"confusion matrix at prob >= this (default: "
           f"{DEFAULTS.threshold})", commands=("evaluate",), default=DEFAULTS.threshold),
    Option("cost-fp", float, f"cost of a false positive (default: {DEFAULTS.cost_fp})",
           commands=("threshold",), default=DEFAULTS.cost_fp),
    Option("cost-fn", float, f"cost of a false negative (default: {DEFAULTS.cost_fn})",
           commands=("threshold",), default=DEFAULTS.cost_fn),
    Option("on-invalid", str, f"bad rows: fail, or drop and count them (default: "
           f"{DEFAULTS.on_invalid})", choices=("raise", "drop"), default=DEFAULTS.on_invalid,
           commands=("fit", "evaluate", "threshold", "summarize", "discretize")),
    Option("on-invalid", str, f"with --report: the report's bad rows: fail, or drop and count "
           f"them (default: {DEFAULTS.on_invalid}); every input row is written, a NaN or null "
           "score calibrated to NaN or null as the model predicts it", choices=("raise", "drop"),
           default=DEFAULTS.on_invalid, commands=("apply",)),
    # monitor's own (docs/history.md), before the --overwrite it shares
    Option("summaries", str, "summary directories, one per period in time order (required)",
           commands=("monitor",), many=True),
    Option("output", str, "monitor report directory to write: report.json, report.html "
           "(required)", commands=("monitor",)),
    Option("alpha", float, "family-wise error rate of the periods' Spiegelhalter tests, "
           "Holm-corrected (default: 0.01)", commands=("monitor",), default=0.01),
    Option("max-ece", float, "a period whose ECE exceeds this alerts too (default: none)",
           commands=("monitor",)),
    Option("fail-on-alert", bool, "exit with status 3 when any period alerts (the JSON line "
           "is printed all the same) (default: exit 0)", commands=("monitor",), default=False),
    Option("overwrite", bool, "replace an existing output once the new one is complete "
           "(default: refuse)", default=False,
           commands=("fit", "apply", "evaluate", "discretize", "summarize", "monitor")),
    Option("scheduler", str, "address of a running Dask scheduler (default: start a "
           "LocalCluster for the run)", entry_points=(DASK_JOB,), commands=(*ALL, "monitor")),
    Option("summaries", str, "fit from these summary directories (written by 'summarize'; "
           "a rolling window is the last N daily ones) instead of --input (default: none)",
           commands=("fit",), many=True),
)


def options_for(command: str, entry_point: str) -> list[Option]:
    return [o for o in OPTIONS if command in o.commands and entry_point in o.entry_points]


def add_options(parser: argparse.ArgumentParser, command: str, entry_point: str) -> None:
    """Add the options of ``command`` at ``entry_point`` to its subparser."""
    for o in options_for(command, entry_point):
        flag = "--" + o.name
        if o.kind is bool:
            parser.add_argument(flag, action="store_true", default=None, help=o.help)
        elif o.repeat:
            parser.add_argument(flag, action="append", default=None, help=o.help,
                                metavar=o.dest.upper())
        elif o.many:
            parser.add_argument(flag, nargs="+", default=None, help=o.help, metavar="DIR")
        else:
            parser.add_argument(flag, type=o.kind, choices=o.choices, default=None,
                                help=o.help, metavar=None if o.choices else o.dest.upper())


def _check_value(o: Option, value: Any, source: str) -> Any:
    def bad(expected: str) -> UsageError:
        return UsageError(f"option '{o.name}' in {source} must be {expected}, got {value!r}")

    if (o.repeat or o.many) and isinstance(value, list):
        return [_check_value(Option(o.name, o.kind, o.help), v, source) for v in value]
    if o.kind is bool:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if o.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
    elif o.kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        value = float(value)
    elif o.kind is str:
        if o.name == "increasing" and isinstance(value, bool):
            value = "true" if value else "false"
        if type(value) is datetime.date:  # YAML reads period: 2026-12-03 as a date
            value = value.isoformat()  # (a timestamp's text is not str()'s: quote it)
        if not isinstance(value, str):
            raise bad("a string")
    if o.choices is not None and value not in o.choices:
        raise bad("one of " + ", ".join(map(str, o.choices)))
    return [value] if o.repeat or o.many else value


class _Refused(Exception):
    """What YAML allows but a config must not have; the message follows "config 'PATH' "."""


def _config_loader() -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses aliases (``*name``: a few lines can expand into
        gigabytes) and a key given twice in one mapping (YAML says keys are unique;
        PyYAML silently keeps the last)."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise _Refused("uses a YAML alias (*name); write the values out")
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise _Refused(f"gives key {key!r} twice (line "
                                       f"{key_node.start_mark.line + 1}); give each option "
                                       "once")
                    seen.add(key)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    pass
            return super().construct_mapping(node, deep=deep)

    return Loader


def load_config(path: str | None, command: str, entry_point: str) -> dict[str, Any]:
    """The typed options of a YAML file, checked against :data:`OPTIONS`."""
    if not path:
        return {}
    import yaml

    try:
        # Only a regular file, checked before it is opened (a FIFO would block,
        # /dev/zero never ends), and at most MAX_CONFIG_BYTES actually read.
        raw = read_regular_file(path, MAX_CONFIG_BYTES, "config")
    except OSError as exc:
        raise UsageError(f"cannot read config '{path}': {exc.strerror}") from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"config '{path}' is not UTF-8 text") from exc
    try:
        doc = yaml.load(text, Loader=_config_loader()) or {}  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise UsageError(f"config '{path}' is not valid YAML: {exc}".splitlines()[0]) from exc
    except _Refused as exc:
        raise UsageError(f"config '{path}' {exc}") from exc
    if not isinstance(doc, dict):
        raise UsageError(f"config '{path}' must be a mapping of option names to values")
    known = {o.dest: o for o in options_for(command, entry_point)}
    out: dict[str, Any] = {}
    spelled: dict[str, Any] = {}
    for key, value in doc.items():
        dest = str(key).replace("-", "_")
        if dest in spelled:  # score_col and score-col: one option written twice
            raise UsageError(f"config '{path}' gives option '{dest.replace('_', '-')}' twice "
                             f"(as '{spelled[dest]}' and '{key}'); give each option once")
        spelled[dest] = key
        if dest == "params":
            raise UsageError(f"'params' in config '{path}' is not an option; write the "
                             "method's parameters as options (e.g. n-bins: 20)")
        if dest not in known or dest == "config":
            raise UsageError(f"unknown option '{key}' in config '{path}' for '{command}'")
        if value is None:
            continue
        out[dest] = _check_value(known[dest], value, f"config '{path}'")
    return out


def resolve_options(args: argparse.Namespace, entry_point: str) -> dict[str, Any]:
    """Command line over config file over defaults, every option of the command present."""
    command = args.command
    cfg = load_config(getattr(args, "config", None), command, entry_point)
    given = {k: v for k, v in vars(args).items() if v is not None}
    opts = {o.dest: o.default for o in options_for(command, entry_point)}
    opts.update(cfg)
    opts.update(given)
    opts.setdefault("engine", {SPARK_JOB: "spark", DASK_JOB: "dask"}.get(entry_point,
                                                                           DEFAULTS.cli_engine))
    if command == "fit":
        _check_method_options(opts["method"], given)
    if command == "export" and opts.get("format") not in (None, "sql"):
        # Options of the SQL export would be ignored (a config file's are defaults).
        sql_only = [n for n in ("dialect", "score_col", "score_cols") if n in given]
        if sql_only:
            raise UsageError(f"--{sql_only[0].replace('_', '-')} is an option of --format "
                             f"sql; this export's format is {opts['format']}")
    return opts


def _check_method_options(method: str, given: dict[str, Any]) -> None:
    """A method's option given on the command line for another --method is a UsageError
    (``fit(method="sigmoid", n_bins=5)`` is a TypeError): it would be ignored, e.g. a
    decreasing map asked of venn_abers. A config file's are defaults for the methods
    that take them."""
    if method not in METHOD_PARAMS:
        return  # the fit names the methods
    for name in given:
        owners = [m for m, params in METHOD_PARAMS.items() if name in params]
        if owners and method not in owners:
            raise UsageError(f"--{name.replace('_', '-')} is an option of --method "
                             f"{' / '.join(owners)}; this fit's method is {method}")
