"""The ``distcal`` command line: fit, apply, evaluate, threshold.

Exit 0 on success; 2 on bad input or usage (an existing output without
``--overwrite`` included) with one line on stderr and nothing written;
1 on any other failure, also with one line. Options may also come from a
YAML file (``--config``): keys are the long option names (``score-col`` or
``score_col``); the command line wins over the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .errors import DataError, ModelError, UsageError

__all__ = ["main", "build_parser", "run"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message}")


def _common(p: argparse.ArgumentParser, *, engine: bool = True) -> None:
    p.add_argument("--config", help="YAML file with option defaults")
    if engine:
        p.add_argument("--engine", choices=("local", "spark", "dask"), default=None)
    p.add_argument("--on-invalid", choices=("raise", "drop"), default=None,
                   help="bad rows: fail (default) or drop and count them")


def build_parser(prog: str = "distcal", extra: Callable[[argparse.ArgumentParser], None]
                 | None = None) -> argparse.ArgumentParser:
    """The parser; ``extra`` adds options to every subcommand (job entry points)."""
    parser = _Parser(prog=prog, description="Exact probability calibration and thresholds.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    f = sub.add_parser("fit", help="fit a calibration map and save the model directory")
    f.add_argument("--input", required=False)
    f.add_argument("--output", required=False, help="model directory to write")
    f.add_argument("--method", choices=("isotonic", "sigmoid", "histogram"), default=None)
    f.add_argument("--score-col", default=None)
    f.add_argument("--label-col", default=None)
    f.add_argument("--weight-col", default=None)
    f.add_argument("--increasing", choices=("true", "false", "auto"), default=None)
    f.add_argument("--interpolation", choices=("linear", "step"), default=None)
    f.add_argument("--y-min", type=float, default=None)
    f.add_argument("--y-max", type=float, default=None)
    f.add_argument("--n-bins", type=int, default=None)
    f.add_argument("--strategy", choices=("uniform", "quantile"), default=None)
    f.add_argument("--overwrite", action="store_true", default=None)
    _common(f)

    a = sub.add_parser("apply", help="add calibrated probabilities to a table")
    a.add_argument("--model", required=False)
    a.add_argument("--input", required=False)
    a.add_argument("--output", required=False, help="Parquet file to write")
    a.add_argument("--score-col", default=None)
    a.add_argument("--output-col", default=None)
    a.add_argument("--report", default=None,
                   help="also write the before/after evaluation report to this directory "
                        "(needs --label-col)")
    a.add_argument("--label-col", default=None)
    a.add_argument("--weight-col", default=None)
    a.add_argument("--overwrite", action="store_true", default=None)
    _common(a)

    e = sub.add_parser("evaluate", help="metrics, plots and an HTML report")
    e.add_argument("--input", required=False)
    e.add_argument("--output", required=False, help="report directory to write")
    e.add_argument("--prob-col", action="append", default=None,
                   help="probability column (repeat for several)")
    e.add_argument("--label-col", default=None)
    e.add_argument("--weight-col", default=None)
    e.add_argument("--n-bins", type=int, default=None)
    e.add_argument("--strategy", choices=("uniform", "quantile"), default=None)
    e.add_argument("--threshold", type=float, default=None)
    e.add_argument("--overwrite", action="store_true", default=None)
    _common(e)

    t = sub.add_parser("threshold", help="print the cost-optimal threshold as JSON")
    t.add_argument("--input", required=False)
    t.add_argument("--score-col", default=None)
    t.add_argument("--label-col", default=None)
    t.add_argument("--weight-col", default=None)
    t.add_argument("--loss-col", default=None)
    t.add_argument("--cost-fp", type=float, default=None)
    t.add_argument("--cost-fn", type=float, default=None)
    _common(t)

    if extra is not None:
        for p in (f, a, e, t):
            extra(p)
    return parser


_DEFAULTS: dict[str, Any] = {
    "engine": "local", "on_invalid": "raise", "method": "isotonic", "score_col": "score",
    "label_col": "label", "weight_col": None, "overwrite": False, "output_col": "calibrated",
    "prob_col": ["prob"], "n_bins": 10, "strategy": "uniform", "threshold": 0.5,
    "cost_fp": 1.0, "cost_fn": 1.0, "loss_col": None,
}


def load_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    import yaml

    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise UsageError(f"cannot read config '{path}': {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"config '{path}' is not valid YAML: {exc}".splitlines()[0]) from exc
    if not isinstance(doc, dict):
        raise UsageError(f"config '{path}' must be a mapping of option names to values")
    return {str(k).replace("-", "_"): v for k, v in doc.items()}


def resolve_options(args: argparse.Namespace) -> dict[str, Any]:
    """Command line over config file over defaults."""
    cfg = load_config(getattr(args, "config", None))
    given = {k: v for k, v in vars(args).items() if v is not None}
    known = set(vars(args)) | {"params"}
    unknown = set(cfg) - known
    if unknown:
        raise UsageError(f"unknown option(s) in config: {sorted(unknown)}")
    opts = {**{k: v for k, v in _DEFAULTS.items() if k in vars(args)}, **cfg, **given}
    if isinstance(opts.get("prob_col"), str):
        opts["prob_col"] = [opts["prob_col"]]
    return opts


def _require(opts: dict[str, Any], *names: str) -> None:
    missing = [n for n in names if not opts.get(n)]
    if missing:
        raise UsageError("missing required option(s): "
                         + ", ".join("--" + n.replace("_", "-") for n in missing))


def _method_params(opts: dict[str, Any]) -> dict[str, Any]:
    params = dict(opts.get("params") or {})
    method = opts["method"]
    if method == "isotonic":
        if opts.get("increasing") is not None:
            inc = str(opts["increasing"]).lower()
            params["increasing"] = {"true": True, "false": False, "auto": "auto"}.get(inc, inc)
        for k in ("interpolation", "y_min", "y_max"):
            if opts.get(k) is not None:
                params[k] = opts[k]
    elif method == "histogram":
        for k in ("n_bins", "strategy"):
            if k in opts and opts[k] is not None:
                params[k] = opts[k]
    return params


def cmd_fit(opts: dict[str, Any], io: Any) -> dict[str, Any]:
    import distcal

    data = io.read(opts)
    _require(opts, "output")
    io.refuse_existing(opts["output"], opts["overwrite"])
    model = distcal.fit(data, method=opts["method"], score_col=opts["score_col"],
                        label_col=opts["label_col"], weight_col=opts["weight_col"],
                        engine=io.engine, on_invalid=opts["on_invalid"], **_method_params(opts))
    io.save_model(model, opts["output"], opts["overwrite"])
    out = {"model": str(opts["output"]), "method": model.method, "n_rows": model.n_rows,
           "weight_total": model.weight_total, "dropped_rows": model.dropped_rows}
    if model.method == "sigmoid":
        out.update(a=model.params["a"], b=model.params["b"])
    else:
        out["blocks"] = len(model.blocks)
    return out


def cmd_apply(opts: dict[str, Any], io: Any) -> dict[str, Any]:
    import distcal

    _require(opts, "model")
    target = io.output_name(opts)
    io.refuse_existing(target, opts["overwrite"], table=opts.get("output_table"))
    if opts.get("report"):
        io.refuse_existing(opts["report"], opts["overwrite"])
    model = io.load_model(opts["model"])
    report = None
    if opts.get("report"):
        # Before and after: the raw score too when the model was fitted on
        # scores in [0, 1] (probabilities, not logits).
        cols = [opts["output_col"]]
        if model.method != "sigmoid":
            b = model.blocks
            if b.score_min.min() >= 0.0 and b.score_max.max() <= 1.0:
                cols.insert(0, opts["score_col"])

        def report(written: Any) -> None:
            # On the new output before it is published: a bad label stops both.
            reports = distcal.evaluate_many(written, cols, label_col=opts["label_col"],
                                            weight_col=opts["weight_col"], engine=io.engine,
                                            on_invalid=opts["on_invalid"])
            io.write_report(list(reports.values()), opts["report"], opts["overwrite"])

    rows = io.apply(model, opts, before_commit=report)
    out = {"output": target, "rows": rows, "output_col": opts["output_col"]}
    if opts.get("report"):
        out["report"] = str(opts["report"])
    return out


def cmd_evaluate(opts: dict[str, Any], io: Any) -> dict[str, Any]:
    import distcal

    data = io.read(opts)
    _require(opts, "output")
    io.refuse_existing(opts["output"], opts["overwrite"])
    reports = list(distcal.evaluate_many(
        data, opts["prob_col"], label_col=opts["label_col"], weight_col=opts["weight_col"],
        n_bins=opts["n_bins"], strategy=opts["strategy"], threshold=opts["threshold"],
        engine=io.engine, on_invalid=opts["on_invalid"]).values())
    io.write_report(reports, opts["output"], opts["overwrite"])
    return {"report": str(opts["output"]),
            "metrics": {r.prob_col: {"brier": r.brier, "log_loss": r.log_loss, "ece": r.ece,
                                     "auc": r.auc} for r in reports}}


def cmd_threshold(opts: dict[str, Any], io: Any) -> dict[str, Any]:
    import distcal

    res = distcal.optimal_threshold(io.read(opts), score_col=opts["score_col"],
                                    label_col=opts["label_col"], weight_col=opts["weight_col"],
                                    cost_fp=opts["cost_fp"], cost_fn=opts["cost_fn"],
                                    loss_col=opts["loss_col"], engine=io.engine,
                                    on_invalid=opts["on_invalid"])
    # +inf (predict nothing positive) prints as JSON's customary Infinity, which
    # Python's json, JavaScript and pandas read back as a number.
    return {"threshold": res.threshold, "cost": res.cost, "tp": res.tp, "fp": res.fp,
            "tn": res.tn, "fn": res.fn, "n_positive_predicted": res.n_positive_predicted}


COMMANDS = {"fit": cmd_fit, "apply": cmd_apply, "evaluate": cmd_evaluate,
            "threshold": cmd_threshold}


def default_io(opts: dict[str, Any]) -> Any:
    """Where data comes from and outputs go, for the engine asked for."""
    engine = opts.get("engine") or "local"
    if engine == "spark":
        from .spark.job import SparkIO

        return SparkIO.embedded()
    if engine == "dask":
        from .engines.dask_io import DaskIO

        return DaskIO.local()
    from .runner import LocalIO

    return LocalIO()


def run(argv: Sequence[str] | None, prog: str = "distcal",
        io_factory: Callable[[dict[str, Any]], Any] | None = None,
        extra: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """Parse, run, print one JSON line; map failures to exit codes and one line."""
    io = None
    try:
        args = build_parser(prog, extra).parse_args(argv)
        opts = resolve_options(args)
        io = (io_factory or default_io)(opts)
        result = COMMANDS[args.command](opts, io)
    except (UsageError, DataError, ModelError, FileExistsError, ValueError, TypeError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not msg.startswith(prog):
            msg = f"{prog}: error: {msg}"
        print(msg, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line for schedulers; the type helps triage
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"{prog}: failed: {type(exc).__name__}: {first}", file=sys.stderr)
        return 1
    finally:
        if io is not None:
            io.close()
    print(json.dumps(result))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
