"""The subcommands, written once against the :class:`~.backend.Backend` interface.

Each takes the resolved options (command line over config file over
defaults) and a backend that knows where data comes from and where outputs
go on its engine, and returns the dict printed as the command's JSON line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..api import fit
from ..defaults import DEFAULTS, METHOD_PARAMS
from ..discretize import discretize
from ..errors import ModelError, UsageError
from ..evaluation import evaluate_many
from ..keyed_model import KeyedModel
from ..storage import MODEL, PARQUET, REPORT
from ..threshold import optimal_threshold
from .backend import Backend, checked_columns, column_list, interval_columns

__all__ = ["COMMANDS", "cmd_fit", "cmd_apply", "cmd_evaluate", "cmd_threshold",
           "cmd_discretize", "cmd_export", "cmd_summarize", "cmd_monitor", "ALERT_EXIT"]


def _require(opts: dict[str, Any], *names: str) -> None:
    """Every option of ``names`` given ("input" is also given by --input-table)."""
    missing = [n for n in names
               if not (opts.get(n) or (n == "input" and opts.get("input_table")))]
    if missing:
        raise UsageError("missing required option(s): "
                         + ", ".join("--" + n.replace("_", "-") for n in missing))


def _method_params(opts: dict[str, Any]) -> dict[str, Any]:
    """The options that are parameters of --method (each one's option has its name)."""
    params = {k: opts[k] for k in METHOD_PARAMS.get(opts["method"], {})
              if opts.get(k) is not None}
    if "increasing" in params:  # "true", "false" or "auto"
        inc = str(params["increasing"]).lower()
        params["increasing"] = {"true": True, "false": False}.get(inc, inc)
    return params


def _provenance(opts: dict[str, Any], command: str) -> dict[str, Any]:
    """What the report records about how it was made."""
    return {"command": f"distcal {command}",
            "input": opts.get("input") or opts.get("input_table"),
            "label_col": opts.get("label_col"), "weight_col": opts.get("weight_col")}


def cmd_fit(opts: dict[str, Any], io: Backend) -> dict[str, Any]:
    if opts.get("summaries"):
        return _fit_summaries(opts, io)
    _require(opts, "input", "output")
    io.check_paths(opts, outputs=[opts["output"]])
    data = io.read(opts)
    io.refuse_existing(opts["output"], opts["overwrite"], kind=MODEL)
    by = column_list(opts.get("by"), "by")
    segments = {} if by is None else {"by": by,
                                      "min_segment_weight": opts["min_segment_weight"]}
    score_cols = column_list(opts.get("score_cols"), "score-cols")
    if score_cols is not None:
        segments["score_cols"] = score_cols
    model = fit(data, method=opts["method"], score_col=opts["score_col"],
                label_col=opts["label_col"], weight_col=opts["weight_col"],
                engine=io.engine, on_invalid=opts["on_invalid"],
                score_index=opts.get("score_index"), **segments, **_method_params(opts))
    io.publish(opts["output"], model.write_dir, opts["overwrite"], MODEL)
    return _fit_line(model, {"model": str(opts["output"]), "method": model.method})


def _fit_line(model: Any, out: dict[str, Any]) -> dict[str, Any]:
    """``fit``'s JSON line (rows or summaries): ``out``, the rows used, the segments and
    the global map's size or parameters."""
    out.update(n_rows=model.n_rows, weight_total=model.weight_total,
               dropped_rows=model.dropped_rows)
    by = getattr(model, "by", None) or None
    if by is not None:
        out.update(by=list(by), segments=len(model.segments),
                   fallback=int(model.segments["fallback"].sum()))
    glob = model.global_model if by is not None else model
    if isinstance(glob, KeyedModel):  # multiclass
        out["classes"] = glob.n_classes
        if glob.method == "temperature":
            out.update(beta=glob.beta, temperature=1.0 / glob.beta)
        return out
    if model.method in ("sigmoid", "beta"):  # params: a, b (and c)
        out.update(glob.params)
    elif model.method == "venn_abers":
        out["steps"] = len(glob._steps.x0) + len(glob._steps.x1)
    else:
        out["blocks"] = len(glob.blocks)
    if model.method == "modl":
        out["cost"] = glob.params["cost"]
    return out


def _summary_dirs(opts: dict[str, Any], io: Backend) -> list[Any]:
    """The --summaries directories, each a summary (ModelError otherwise), none an output.

    Local ones as paths (the engine reads their tables); one on another store
    is read through the backend's store (as --model is) and checked here.
    """
    from ..summary import SUMMARY_JSON, is_summary_dir, load_summary_on

    dirs = [str(d) for d in opts["summaries"]]
    items: list[Any] = []
    for d in dirs:
        fs = io.filesystem(d)
        if not (is_summary_dir(d) if fs.local
                else fs.exists(d.rstrip("/") + "/" + SUMMARY_JSON)):
            raise ModelError(f"'{d}' is not a distcal summary directory (no summary.json)")
        io.check_paths({"input": d}, outputs=[opts["output"]])
        items.append(d if fs.local else load_summary_on(fs, d))
    return items


def _fit_summaries(opts: dict[str, Any], io: Backend) -> dict[str, Any]:
    """``fit --summaries``: the fit of the summarised rows (their columns and segments)."""
    _require(opts, "output")
    if opts.get("input") or opts.get("input_table") or opts.get("by") or opts.get(
            "score_cols") or opts.get("score_index") is not None:
        raise UsageError("--summaries replaces --input (and --input-table); the columns and "
                         "--by are the summaries' own")
    dirs = _summary_dirs(opts, io)
    io.refuse_existing(opts["output"], opts["overwrite"], kind=MODEL)
    # The column options are the summaries' own: another one is a ParameterError (exit 2).
    model = fit(dirs, method=opts["method"], engine=io.engine,
                score_col=opts["score_col"], label_col=opts["label_col"],
                weight_col=opts["weight_col"], on_invalid=opts["on_invalid"],
                min_segment_weight=opts["min_segment_weight"], **_method_params(opts))
    io.publish(opts["output"], model.write_dir, opts["overwrite"], MODEL)
    return _fit_line(model, {"model": str(opts["output"]), "method": model.method,
                             "summaries": len(dirs)})


def cmd_summarize(opts: dict[str, Any], io: Backend) -> dict[str, Any]:
    from ..storage import SUMMARY
    from ..summary import summarize

    _require(opts, "input", "output")
    io.check_paths(opts, outputs=[opts["output"]])
    data = io.read(opts)
    io.refuse_existing(opts["output"], opts["overwrite"], kind=SUMMARY)
    s = summarize(data, score_col=opts["score_col"], label_col=opts["label_col"],
                  weight_col=opts["weight_col"], by=column_list(opts.get("by"), "by"),
                  engine=io.engine, period=opts.get("period"), decimals=opts.get("decimals"),
                  on_invalid=opts["on_invalid"])
    io.publish(opts["output"], s.write_dir, opts["overwrite"], SUMMARY)
    return {"summary": str(opts["output"]), "period": s.period, "n_rows": s.n_rows,
            "weight_total": s.weight_total, "dropped_rows": s.dropped_rows,
            "distinct": len(s), "by": s.by, "decimals": s.decimals}


# The exit status of ``monitor --fail-on-alert`` when a period alerts (its JSON line is
# printed all the same): a scheduler marks the task failed.
ALERT_EXIT = 3


def cmd_monitor(opts: dict[str, Any], io: Backend) -> dict[str, Any]:
    from ..monitor import monitor

    _require(opts, "summaries", "output")
    dirs = _summary_dirs(opts, io)
    io.refuse_existing(opts["output"], opts["overwrite"], kind=REPORT)
    rep = monitor(dirs, alpha=opts["alpha"], max_ece=opts.get("max_ece"), engine=io.engine)
    io.publish(opts["output"], rep.write_dir, opts["overwrite"], REPORT)
    # a summary saved without --period is named by its directory
    alerts = [str(dirs[int(i)]) if p is None else p
              for i, p in zip(rep.alerts.index, rep.alerts["period"])]
    out: dict[str, Any] = {"report": str(opts["output"]), "periods": len(rep.table),
                           "alerts": alerts, "n_alerts": len(alerts)}
    if alerts and opts.get("fail_on_alert"):
        out["exit_status"] = ALERT_EXIT
    return out


def cmd_apply(opts: dict[str, Any], io: Backend) -> dict[str, Any]:
    _require(opts, "model", "input")
    target = io.output_name(opts)
    io.check_paths(opts, outputs=[t for t in (opts.get("output"), opts.get("report")) if t])
    io.refuse_existing(target, opts["overwrite"], table=opts.get("output_table"), kind=PARQUET)
    if opts.get("report"):
        io.refuse_existing(opts["report"], opts["overwrite"], kind=REPORT)
    model = io.load_model(opts["model"])
    opts = {**opts, **_score_columns(model, opts)}
    if not opts.get("report"):
        rows = io.apply(model, opts)
    else:
        # Before and after: the raw score too when the model (binary, or its global
        # map per segment) was fitted on scores in [0, 1] (probabilities, not logits).
        cols = [opts["output_col"]]
        binary = not isinstance(model, KeyedModel) or model.n_classes < 2
        if binary and model.method not in ("sigmoid", "beta", "venn_abers") \
                and opts.get("score_index") is None:
            b = getattr(model, "global_model", model).blocks
            if b.score_min.min() >= 0.0 and b.score_max.max() <= 1.0:
                cols.insert(0, opts["score_col"])
        # The report is written aside on the new output before that is published (a
        # bad label stops both), and published after it: never a report of an output
        # that did not appear.
        with io.publishing(opts["report"], opts["overwrite"], REPORT) as report_dir:

            def report(written: Any) -> None:
                reports = evaluate_many(
                    written, cols, label_col=opts["label_col"], weight_col=opts["weight_col"],
                    engine=io.engine, on_invalid=opts["on_invalid"],
                    interval_cols=interval_columns(opts.get("interval_cols")))
                io.report_files(list(reports.values()), report_dir,
                                provenance={**_provenance(opts, "apply"), "output": target,
                                            "model_dir": str(opts["model"])},
                                model=model)

            rows = io.apply(model, opts, before_commit=report)
    out = {"output": target, "rows": rows, "output_col": opts["output_col"]}
    if opts.get("report"):
        out["report"] = str(opts["report"])
    return out


def _score_columns(model: Any, opts: dict[str, Any]) -> dict[str, Any]:
    """apply's scores: --score-col or --score-cols as given; neither: the per-class columns
    a multiclass model was fitted on (as ``transform`` reads them), else 'score'."""
    if opts.get("score_col") is not None or opts.get("score_cols"):
        return {}
    fitted = model.columns.get("scores") if isinstance(model, KeyedModel) else None
    if fitted:
        return {"score_cols": list(fitted)}
    return {"score_col": DEFAULTS.score_col}


def _predictions(opts: dict[str, Any], columns: Callable[[], list[str]]) -> list[Any]:
    """What ``evaluate`` compares: each --prob-col, then each --prob-cols as a list.

    Without either, the library's ``prob_col`` ("prob"); an input without it that
    has the column 'apply' writes ("calibrated") is evaluated on that one.
    ``columns()``: the input's column names.
    """
    groups = [checked_columns(v, "prob-cols", least=2) for v in opts.get("prob_cols") or []]
    cols: list[Any] = list(opts.get("prob_col") or [])
    if not cols and not groups:
        names = columns()
        applied = DEFAULTS.prob_col not in names and DEFAULTS.output_col in names
        cols = [DEFAULTS.output_col if applied else DEFAULTS.prob_col]
    return cols + groups


def _summary(r: Any) -> dict[str, Any]:
    """The metrics of one report in the command's JSON line."""
    if hasattr(r, "classwise_ece"):  # multiclass
        return {"log_loss": r.log_loss, "brier": r.brier, "accuracy": r.accuracy,
                "ece": r.ece, "classwise_ece": r.classwise_ece}
    return {"brier": r.brier, "log_loss": r.log_loss, "ece": r.ece, "auc": r.auc}


def cmd_evaluate(opts: dict[str, Any], io: Backend) -> dict[str, Any]:
    _require(opts, "input", "output")
    io.check_paths(opts, outputs=[opts["output"]])
    data = io.read(opts)
    predictions = _predictions(opts, lambda: io.column_names(data))
    io.refuse_existing(opts["output"], opts["overwrite"], kind=REPORT)
    kw = {"label_col": opts["label_col"], "weight_col": opts["weight_col"],
          "n_bins": DEFAULTS.n_bins if opts.get("n_bins") is None else opts["n_bins"],
          "strategy": opts.get("strategy") or DEFAULTS.strategy,
          "threshold": opts["threshold"], "engine": io.engine,
          "on_invalid": opts["on_invalid"],
          "interval_cols": interval_columns(opts.get("interval_cols"))}
    by = column_list(opts.get("by"), "by")
    if by is not None and any(not isinstance(p, str) for p in predictions):
        raise UsageError("--by evaluates binary probability columns (--prob-col); "
                         "it does not take --prob-cols")
    # every column on the same rows (a row invalid in one is invalid for all), by segment too
    reports = list(evaluate_many(data, predictions, by=by, **kw).values())
    io.write_report(reports, opts["output"], opts["overwrite"],
                    provenance=_provenance(opts, "evaluate"))
    out = {"report": str(opts["output"]),
           "metrics": {r.prob_col: _summary(r) for r in reports}}
    if by is not None:
        out.update(by=by, segments={r.prob_col: _n_segments(r) for r in reports})
    return out


def _n_segments(report: Any) -> int:
    table = getattr(report, "segments", None)
    return 0 if table is None else len(table)


def cmd_threshold(opts: dict[str, Any], io: Backend) -> dict[str, Any]:
    res = optimal_threshold(io.read(opts), score_col=opts["score_col"],
                            label_col=opts["label_col"], weight_col=opts["weight_col"],
                            cost_fp=opts["cost_fp"], cost_fn=opts["cost_fn"],
                            loss_col=opts["loss_col"], engine=io.engine,
                            on_invalid=opts["on_invalid"], score_index=opts.get("score_index"),
                            by=column_list(opts.get("by"), "by"))
    # +inf (predict nothing positive) prints as null with the reason in "why_null"
    # (standard JSON has no Infinity: distcal.jsonsafe).
    out: dict[str, Any] = {
        "threshold": res.threshold, "predict_none": res.predict_none, "cost": res.cost,
        "tp": res.tp, "fp": res.fp, "tn": res.tn, "fn": res.fn,
        "n_positive_predicted": res.n_positive_predicted}
    if res.segments is not None:  # ±inf keys as "Infinity"/"-Infinity", never null
        out["segments"] = res.to_dict()["segments"]
    return out


def cmd_discretize(opts: dict[str, Any], io: Backend) -> dict[str, Any]:
    _require(opts, "input")
    if opts.get("output"):
        io.check_paths(opts, outputs=[opts["output"]])
        io.refuse_existing(opts["output"], opts["overwrite"], kind=PARQUET)
    table = discretize(io.read(opts), score_col=opts["score_col"], label_col=opts["label_col"],
                       engine=io.engine, max_classes=opts["max_classes"],
                       max_groups=opts.get("max_groups") or METHOD_PARAMS["modl"]["max_groups"],
                       on_invalid=opts["on_invalid"])
    if opts.get("output"):  # one Parquet file; the class labels' columns named as text
        io.publish(opts["output"], lambda p: table.rename(columns=str).to_parquet(p, index=False),
                   opts["overwrite"], PARQUET)
    return {"cost": table.attrs["cost"], "exact": table.attrs["exact"],
            "intervals": [{str(k): v for k, v in row.items()}
                          for row in table.to_dict(orient="records")],
            **({"output": str(opts["output"])} if opts.get("output") else {})}


def cmd_export(opts: dict[str, Any], io: Backend) -> dict[str, Any]:
    """The model as SQL (one expression a line: p, or p_0 ... p_{K-1}), ONNX or MLflow.

    The output is published like every other (written aside, committed
    atomically) and never replaces an existing path, nor the model it reads.
    """
    from pathlib import Path

    _require(opts, "model", "format", "output")
    out, fmt = str(opts["output"]), opts["format"]
    io.check_paths(opts, outputs=[out])
    if io.filesystem(out).exists(out):
        raise UsageError(f"output '{out}' exists; export never replaces a path (remove it "
                         "first)")
    model = io.load_model(opts["model"])
    result: dict[str, Any] = {"output": out, "format": fmt, "method": model.method}

    def write(tmp: Path) -> None:
        if fmt == "sql":
            score: Any = opts.get("score_col")
            if opts.get("score_cols"):
                score = column_list(opts["score_cols"], "score-cols")
            elif score is None and not isinstance(model, KeyedModel):
                from ..export.sql import quoted_column

                # the fit's column as the data names it (a dot, a space, a keyword)
                score = quoted_column(model.columns.get("score") or DEFAULTS.score_col,
                                      opts["dialect"])
            try:
                exprs = model.to_sql(score=score, dialect=opts["dialect"])
            except ValueError as exc:  # a score expression that is no SQL, a wrong count
                raise UsageError(str(exc)) from exc
            lines = [exprs] if isinstance(exprs, str) else list(exprs)
            tmp.write_text("".join(e + "\n" for e in lines))
            result.update(dialect=opts["dialect"], expressions=len(lines))
        elif fmt == "onnx":
            by = list(getattr(model, "by", None) or [])
            if by:
                raise UsageError(f"--format onnx: an ONNX graph takes scores only, not the "
                                 f"segment keys of this model (by {', '.join(by)}); "
                                 "export --format sql, which selects each row's segment map "
                                 "by key, or fit a model without --by for ONNX")
            tmp.write_bytes(model.to_onnx().SerializeToString())
        else:
            from ..mlflow import write_model_dir

            write_model_dir(model, tmp)

    io.publish(out, write)
    return result


COMMANDS = {"fit": cmd_fit, "apply": cmd_apply, "evaluate": cmd_evaluate,
            "threshold": cmd_threshold, "discretize": cmd_discretize, "export": cmd_export,
            "summarize": cmd_summarize, "monitor": cmd_monitor}
