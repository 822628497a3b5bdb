"""The command line, run as real subprocesses on real Parquet files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_scores
from sklearn.isotonic import IsotonicRegression

import distcal

DISTCAL = [sys.executable, "-m", "distcal"]


def run(*args, cwd=None):
    return subprocess.run([*DISTCAL, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.fixture
def scores_path(tmp_path):
    df = make_scores(20000, seed=5, weights=True)
    df["id"] = np.arange(len(df))
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    return path, df


def test_fit_apply_evaluate_threshold(scores_path, tmp_path):
    path, df = scores_path
    r = run("fit", "--input", path, "--output", tmp_path / "model", "--weight-col", "w")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["method"] == "isotonic" and info["n_rows"] == int((df.w > 0).sum())
    model = distcal.load(tmp_path / "model")
    live = df[df.w > 0]
    ir = IsotonicRegression(out_of_bounds="clip").fit(live.score, live.label, sample_weight=live.w)

    r = run("apply", "--model", tmp_path / "model", "--input", path, "--output",
            tmp_path / "out.parquet")
    assert r.returncode == 0, r.stderr
    out = pq.read_table(tmp_path / "out.parquet").to_pandas()
    assert list(out.columns) == ["score", "label", "w", "id", "calibrated"]
    np.testing.assert_array_equal(out["id"], df["id"])
    np.testing.assert_allclose(out["calibrated"], ir.predict(df.score), atol=1e-12)
    np.testing.assert_array_equal(out["calibrated"], model.predict(df.score))

    r = run("evaluate", "--input", tmp_path / "out.parquet", "--output", tmp_path / "rep",
            "--prob-col", "calibrated", "--prob-col", "score")
    assert r.returncode == 0, r.stderr
    assert {p.name for p in (tmp_path / "rep").iterdir()} >= {
        "report.json", "report.html", "reliability.png", "roc.png"}
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert set(doc["reports"]) == {"calibrated", "score"}

    r = run("threshold", "--input", path, "--cost-fp", "1", "--cost-fn", "3", "--weight-col", "w")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert set(res) >= {"threshold", "predict_none", "cost", "tp", "fp", "tn", "fn"}
    direct = distcal.optimal_threshold(df, weight_col="w", cost_fp=1, cost_fn=3)
    assert res["predict_none"] is direct.predict_none
    assert res["threshold"] == direct.threshold and res["cost"] == pytest.approx(direct.cost)


def test_evaluate_reads_prob_by_default_or_what_apply_wrote(tmp_path):
    """Without --prob-col: the library's prob_col ("prob"); in an input without it, the
    column apply writes ("calibrated")."""
    from sklearn.metrics import brier_score_loss

    df = make_scores(2000, seed=5)
    prob = np.clip(df.score + 0.1, 0, 1)
    frames = {"both": df.assign(prob=prob, calibrated=df.score), "prob": df.assign(prob=prob),
              "applied": df.assign(calibrated=prob)}
    for name, frame in frames.items():
        frame.to_parquet(tmp_path / f"{name}.parquet")
        r = run("evaluate", "--input", tmp_path / f"{name}.parquet", "--output",
                tmp_path / f"rep_{name}")
        assert r.returncode == 0, r.stderr
        (col, metrics), = json.loads(r.stdout)["metrics"].items()
        assert col == ("calibrated" if name == "applied" else "prob")
        assert metrics["brier"] == pytest.approx(brier_score_loss(df.label, prob), rel=1e-12)
    df.to_parquet(tmp_path / "none.parquet")
    r = run("evaluate", "--input", tmp_path / "none.parquet", "--output", tmp_path / "r")
    assert r.returncode == 2 and "column 'prob' (prob) not found" in r.stderr


def test_apply_reads_the_per_class_columns_a_model_was_fitted_on(tmp_path):
    """apply without --score-col / --score-cols: a model fitted on per-class columns (or on
    one column of logits, for temperature) reads them, as model.transform does."""
    from scipy.special import expit

    rng = np.random.default_rng(6)
    s = rng.normal(size=(1500, 3))
    y = np.array([rng.choice(3, p=np.exp(r) / np.exp(r).sum()) for r in s])
    df = pd.DataFrame({"s0": s[:, 0], "s1": s[:, 1], "s2": s[:, 2], "label": y,
                       "score": s[:, 0], "binary": (y == 0).astype(np.int64)})
    df.to_parquet(tmp_path / "in.parquet")
    for name, fit_opts, label in [("ovr", ["--score-cols", "s0,s1,s2"], "label"),
                                  ("temperature", ["--method", "temperature"], "binary")]:
        r = run("fit", "--input", tmp_path / "in.parquet", "--output", tmp_path / name,
                "--label-col", label, *fit_opts)
        assert r.returncode == 0, r.stderr
        # (the column of the fit, named or not: one logit column is the temperature's too)
        named = ["--score-col", "score"] if name == "temperature" else []
        r = run("apply", "--model", tmp_path / name, "--input", tmp_path / "in.parquet",
                "--output", tmp_path / f"{name}.parquet", *named)
        assert r.returncode == 0, r.stderr
        got = np.stack(pd.read_parquet(tmp_path / f"{name}.parquet")["calibrated"])
        model = distcal.load(tmp_path / name)
        if name == "ovr":
            np.testing.assert_array_equal(got, model.predict(s))
        else:  # one logit per row: p1 = sigmoid(2 beta s)
            np.testing.assert_allclose(got[:, 1], expit(2 * model.params["beta"] * s[:, 0]),
                                       rtol=1e-12)


def test_fit_takes_each_methods_options(scores_path, tmp_path):
    """Every method parameter has its option: the model is the API's with that parameter,
    and a config file's options of other methods are left to those methods."""
    path, df = scores_path
    cases = [("modl", ["--max-groups", "50"], {"max_groups": 50}),
             ("histogram", ["--n-bins", "7", "--strategy", "quantile"],
              {"n_bins": 7, "strategy": "quantile"}),
             ("isotonic", ["--increasing", "false", "--interpolation", "step"],
              {"increasing": False, "interpolation": "step"})]
    for method, options, params in cases:
        r = run("fit", "--input", path, "--output", tmp_path / method, "--method", method,
                *options)
        assert r.returncode == 0, r.stderr
        assert distcal.load(tmp_path / method) == distcal.fit(df, method=method, **params)
    assert distcal.load(tmp_path / "modl").params["groups"] <= 50
    r = run("discretize", "--input", path, "--max-groups", "20")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cost"] == distcal.discretize(df, max_groups=20).attrs["cost"]
    holes = df.assign(score=df.score.where(df.index % 50 != 0))  # NaN scores
    holes.to_parquet(tmp_path / "holes.parquet")
    r = run("discretize", "--input", tmp_path / "holes.parquet")
    assert r.returncode == 2 and "pass --on-invalid drop" in r.stderr
    r = run("discretize", "--input", tmp_path / "holes.parquet", "--on-invalid", "drop")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cost"] == distcal.discretize(holes.dropna()).attrs["cost"]
    (tmp_path / "c.yaml").write_text("increasing: false\nn-bins: 7\n")
    r = run("fit", "--input", path, "--output", tmp_path / "sig", "--method", "sigmoid",
            "--config", tmp_path / "c.yaml")
    assert r.returncode == 0, r.stderr
    assert distcal.load(tmp_path / "sig") == distcal.fit(df, method="sigmoid")


def test_console_script_is_installed(scores_path, tmp_path):
    exe = shutil.which("distcal", path=os.path.dirname(sys.executable))
    assert exe, "the distcal console script is not installed next to python"
    r = subprocess.run([exe, "fit", "--input", str(scores_path[0]), "--output",
                        str(tmp_path / "m"), "--method", "sigmoid"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert distcal.load(tmp_path / "m").method == "sigmoid"


def test_config_file(scores_path, tmp_path):
    path, df = scores_path
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"input: {path}\nmethod: histogram\nn-bins: 7\nstrategy: quantile\n"
                   "weight_col: w\n")
    r = run("fit", "--config", cfg, "--output", tmp_path / "m", "--n-bins", "5")
    assert r.returncode == 0, r.stderr
    m = distcal.load(tmp_path / "m")
    assert m.method == "histogram" and m.params["n_bins"] == 5  # command line wins
    assert m.params["strategy"] == "quantile" and m.columns["weight"] == "w"


def test_existing_output_needs_overwrite(scores_path, tmp_path):
    path, _ = scores_path
    assert run("fit", "--input", path, "--output", tmp_path / "m").returncode == 0
    before = (tmp_path / "m" / "model.json").read_bytes()
    r = run("fit", "--input", path, "--output", tmp_path / "m", "--method", "sigmoid")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "--overwrite" in r.stderr
    assert (tmp_path / "m" / "model.json").read_bytes() == before
    r = run("fit", "--input", path, "--output", tmp_path / "m", "--method", "sigmoid",
            "--overwrite")
    assert r.returncode == 0, r.stderr
    assert distcal.load(tmp_path / "m").method == "sigmoid"


def test_bad_input_exits_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"score": [0.1, float("nan"), 0.3], "label": [0, 1, 3]}), bad)
    for args in (["fit", "--input", bad, "--output", tmp_path / "m"],
                 ["evaluate", "--input", bad, "--output", tmp_path / "r", "--prob-col", "score"],
                 ["threshold", "--input", bad]):
        r = run(*args)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1
        assert "column 'score': 1 row is null or NaN" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]


def test_overwrite_keeps_old_output_when_new_one_fails(scores_path, tmp_path):
    path, _ = scores_path
    assert run("fit", "--input", path, "--output", tmp_path / "m").returncode == 0
    before = (tmp_path / "m" / "model.json").read_bytes()
    r = run("fit", "--input", path, "--output", tmp_path / "m", "--label-col", "nope",
            "--overwrite")
    assert r.returncode == 2 and "column 'nope'" in r.stderr
    assert (tmp_path / "m" / "model.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "scores.parquet"]


@pytest.mark.parametrize("args,needle", [
    (["fit"], "--input"),
    (["fit", "--input", "x.parquet", "--method", "magic"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
    (["apply", "--model", "no-such-model", "--input", "x", "--output", "y.parquet"],
     "does not exist"),
])
def test_usage_errors(args, needle, tmp_path):
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr


def test_apply_hive_partitioned_dataset(tmp_path):
    df = make_scores(4000, seed=6)
    df["day"] = np.repeat(["2026-11-01", "2026-11-02"], 2000)
    pq.write_to_dataset(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "ds",
                        partition_cols=["day"])
    assert run("fit", "--input", tmp_path / "ds", "--output", tmp_path / "m").returncode == 0
    r = run("apply", "--model", tmp_path / "m", "--input", tmp_path / "ds", "--output",
            tmp_path / "o.parquet")
    assert r.returncode == 0, r.stderr
    out = pq.read_table(tmp_path / "o.parquet").to_pandas()
    assert len(out) == 4000 and "day" in out.columns
    model = distcal.fit(df)
    np.testing.assert_array_equal(out["calibrated"], model.predict(out["score"]))


def test_demo_module_runs(tmp_path):
    r = subprocess.run([sys.executable, "-m", "distcal.demo", "--out", str(tmp_path / "demo"),
                        "--rows", "20000"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "report.html" in r.stdout
    d = Path(tmp_path / "demo")
    assert distcal.load(d / "model").n_rows == 20000
    doc = json.loads((d / "report" / "report.json").read_text())["reports"]
    assert doc["calibrated"]["ece"] < doc["score"]["ece"]


def test_apply_writes_before_after_report(scores_path, tmp_path):
    path, df = scores_path
    assert run("fit", "--input", path, "--output", tmp_path / "m", "--weight-col", "w"
               ).returncode == 0
    r = run("apply", "--model", tmp_path / "m", "--input", path, "--output",
            tmp_path / "o.parquet", "--report", tmp_path / "rep", "--weight-col", "w")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["columns"] == ["score", "calibrated"]
    assert doc["reports"]["calibrated"]["ece"] < doc["reports"]["score"]["ece"]
    # bad labels: neither the output nor the report appears
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"score": [0.1, 0.5, 0.9], "label": [0, 1, 7]}), bad)
    r = run("apply", "--model", tmp_path / "m", "--input", bad, "--output",
            tmp_path / "o2.parquet", "--report", tmp_path / "rep2")
    assert r.returncode == 2 and "column 'label': 1 row is outside [0, 1]" in r.stderr
    assert not (tmp_path / "o2.parquet").exists() and not (tmp_path / "rep2").exists()
    # text in the score column: the DataError of model.transform, nothing written (it
    # was NaN in the output)
    text = tmp_path / "text.parquet"
    pq.write_table(pa.table({"score": ["0.1", "x", "0.9"], "label": [0, 1, 1]}), text)
    r = run("apply", "--model", tmp_path / "m", "--input", text, "--output",
            tmp_path / "o3.parquet")
    assert r.returncode == 2 and "column 'score': 3 rows are text, not numbers" in r.stderr
    assert not (tmp_path / "o3.parquet").exists()


def test_apply_reports_on_a_model_per_segment(tmp_path):
    """The report of a segmented model's output: before (the raw score) and after, with
    no map figure (one map per segment); the numbers are scikit-learn's."""
    from sklearn.metrics import brier_score_loss, roc_auc_score

    df = make_scores(3000, seed=8).assign(g=lambda d: np.arange(len(d)) % 3)
    df.to_parquet(tmp_path / "in.parquet")
    assert run("fit", "--input", tmp_path / "in.parquet", "--output", tmp_path / "m",
               "--by", "g").returncode == 0
    r = run("apply", "--model", tmp_path / "m", "--input", tmp_path / "in.parquet",
            "--output", tmp_path / "o.parquet", "--report", tmp_path / "rep")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["columns"] == ["score", "calibrated"]
    p = distcal.load(tmp_path / "m").predict(df.score, segments=df.g)
    assert doc["reports"]["calibrated"]["brier"] == pytest.approx(
        brier_score_loss(df.label, p), rel=1e-9)
    assert doc["reports"]["score"]["auc"] == pytest.approx(roc_auc_score(df.label, df.score),
                                                           rel=1e-12)
    assert sorted(f.name for f in (tmp_path / "rep").glob("*.png")) == [
        "cost.png", "reliability.png", "roc.png"]


def test_apply_publishes_its_report_only_with_its_output(scores_path, tmp_path, monkeypatch):
    """The output's commit fails (another run created it meanwhile): no report either."""
    from distcal.cli.main import main
    from distcal.storage import publish

    path, _ = scores_path
    assert main(["fit", "--input", str(path), "--output", str(tmp_path / "m")]) == 0
    commit = publish._commit

    def output_appears(fs, tmp, target, *args, **kwargs):
        if target.endswith(".parquet"):
            raise publish.OutputExistsError(target)
        return commit(fs, tmp, target, *args, **kwargs)

    monkeypatch.setattr(publish, "_commit", output_appears)
    argv = ["apply", "--model", str(tmp_path / "m"), "--input", str(path), "--output",
            str(tmp_path / "o.parquet"), "--report", str(tmp_path / "rep")]
    assert main(argv) == 2
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "rep").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "scores.parquet"]
    monkeypatch.setattr(publish, "_commit", commit)
    assert main(argv) == 0  # and both appear
    assert (tmp_path / "o.parquet").is_file() and (tmp_path / "rep" / "report.json").is_file()


def test_apply_to_parquet_refuses_text_scores(tmp_path):
    """Binary, Venn-Abers with its interval columns, segments, multiclass: text scores are
    a DataError counting the rows of the whole input, not of the first batch holding them."""
    from distcal.apply import apply_to_parquet

    df = make_scores(500, seed=3).assign(g=lambda d: np.arange(len(d)) % 2)
    src = tmp_path / "text.parquet"
    # 3 row groups of 4 rows, read a batch each: every cell is text ("0.2" too).
    scores = ["0.2", "0.5", "high", "0.1", "0.3", "0.4", "0.6", "0.7", "low", "x", "0.8", "0.9"]
    pq.write_table(pa.table({"score": scores, "s1": scores, "label": [0, 1] * 6,
                             "g": [0, 1] * 6}), src, row_group_size=4)
    classes = df.assign(s0=1 - df["score"], s1=df["score"])
    for model, options in [
            (distcal.fit(df), {}),
            (distcal.fit(df, method="venn_abers"), {"interval_cols": ("p0", "p1")}),
            (distcal.fit(df, by="g"), {}),
            (distcal.fit(classes, score_cols=["s0", "s1"]), {"score_cols": ["score", "s1"]})]:
        with pytest.raises(distcal.DataError, match="column 'score': 12 rows are text"):
            apply_to_parquet(model, src, tmp_path / "o.parquet", batch_rows=4, **options)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["text.parquet"]


def test_threshold_json_with_nothing_positive(tmp_path):
    path = tmp_path / "neg.parquet"
    pq.write_table(pa.table({"score": [0.1, 0.5, 0.9], "label": [0, 0, 0]}), path)
    r = run("threshold", "--input", path)
    assert r.returncode == 0, r.stderr
    # Standard JSON (issue 34): +inf is null, with the reason beside it.
    res = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON line"))
    assert res["threshold"] is None and res["predict_none"] is True
    assert res["why_null"]["threshold"].startswith("+inf")
    assert res["cost"] == 0 and res["tn"] == 3


def test_evaluate_writes_a_multiclass_report(tmp_path, capsys):
    """A vector column (--prob-col) and per-class columns (--prob-cols) compared in one report."""
    from scipy.special import softmax
    from sklearn.metrics import confusion_matrix, log_loss

    rng = np.random.default_rng(12)
    n, k = 2000, 3
    y = rng.integers(0, k, n)
    z = rng.normal(size=(n, k))
    z[np.arange(n), y] += 1.0
    P, Q = softmax(3 * z, axis=1), softmax(z, axis=1)
    table = pa.table({"probs": pa.array(list(P), type=pa.list_(pa.float64())), "y": y,
                      **{f"q{j}": Q[:, j] for j in range(k)}})
    pq.write_table(table, tmp_path / "x.parquet")
    r = run("evaluate", "--input", tmp_path / "x.parquet", "--prob-col", "probs",
            "--prob-cols", "q0,q1,q2", "--label-col", "y", "--output", tmp_path / "rep")
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)["metrics"]
    assert line["probs"]["log_loss"] == pytest.approx(log_loss(y, P), rel=1e-12)
    assert line["q0,q1,q2"]["log_loss"] == pytest.approx(log_loss(y, Q), rel=1e-12)
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["kind"] == "multiclass" and doc["columns"] == ["probs", "q0,q1,q2"]
    for name, M in (("probs", P), ("q0,q1,q2", Q)):
        rep = doc["reports"][name]
        assert rep["confusion_matrix"] == confusion_matrix(y, M.argmax(axis=1)).tolist()
        assert [sum(b["weight"] for b in c) for c in rep["class_curves"]] == [n] * k
        assert len(rep["class_curves"]) == k
    page = (tmp_path / "rep" / "report.html").read_text()
    assert page.count('<table class="confusion"') == 2
    assert 'id="fig-reliability_classes"' in page and 'id="fig-confusion"' in page
    assert {"reliability.png", "reliability_classes.png", "confusion.png"} <= {
        p.name for p in (tmp_path / "rep").iterdir()}
    # in this process: a second interpreter start would only repeat the imports
    from distcal.cli.main import main

    assert main(["evaluate", "--input", str(tmp_path / "x.parquet"), "--prob-cols", "q0",
                 "--label-col", "y", "--output", str(tmp_path / "rep2")]) == 2
    assert "--prob-cols must be two or more" in capsys.readouterr().err
    assert not (tmp_path / "rep2").exists()



# Two in-process runs, each under its own pytest capture (closed when its test ends): the
# distcal logger must write to the stderr of the run at hand, never to a stream an earlier
# run had (as a notebook's earlier cell).
def test_in_process_run_under_a_capture(tmp_path, capsys):
    from distcal.cli.main import main

    make_scores(500, seed=9).to_parquet(tmp_path / "in.parquet")
    assert main(["fit", "--input", str(tmp_path / "in.parquet"), "--output",
                 str(tmp_path / "m"), "-v"]) == 0
    assert "distcal INFO" in capsys.readouterr().err


def test_quiet_prints_errors_only_not_warnings(tmp_path):
    """-q: "log errors only": the library's warnings (here beta calibration's on scores
    that separate the classes) are left out too; without -q they show."""
    pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.7, 0.8, 0.9] * 5,
                  "label": [0, 0, 0, 1, 1, 1] * 5}).to_parquet(tmp_path / "sep.parquet")
    loud = run("fit", "--input", tmp_path / "sep.parquet", "--output", tmp_path / "m1",
               "--method", "beta")
    assert loud.returncode == 0 and "separate the classes" in loud.stderr
    quiet = run("fit", "--input", tmp_path / "sep.parquet", "--output", tmp_path / "m2",
                "--method", "beta", "-q")
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert distcal.load(tmp_path / "m1") == distcal.load(tmp_path / "m2")


def test_in_process_run_after_an_earlier_capture_closed(tmp_path, capsys):
    from distcal.cli.main import main

    make_scores(500, seed=9).to_parquet(tmp_path / "in.parquet")
    for flag, out in (("-q", "m1"), ("-v", "m2")):
        assert main(["fit", "--input", str(tmp_path / "in.parquet"), "--output",
                     str(tmp_path / out), flag]) == 0, capsys.readouterr().err
    assert "distcal INFO" in capsys.readouterr().err


def test_widened_files_dotted_columns_output_col_and_a_closed_stdout(tmp_path, capsys):
    """A dataset whose later files widen a column exactly (int32 then int64 labels read
    through an int64 first file) is read as the API reads it, and a narrowing is refused
    as the API refuses it; export's default score is the fit's column as the data names
    it (s.x was read as column x of table s); apply --output-col score, for a model fitted
    on per-class columns, is no clash; a reader that closes stdout (| true) ends no run
    with a traceback."""
    import duckdb

    from distcal.cli.main import main

    def cli(*args):
        code = main([str(a) for a in args])
        return code, capsys.readouterr()

    df = make_scores(2000, seed=4)
    for order, ok in ((("int64", "int32"), True), (("int32", "int64"), False)):
        d = tmp_path / f"{order[0]}-first"
        d.mkdir()
        for i, t in enumerate(order):
            part = df.iloc[i * 1000:(i + 1) * 1000]
            pq.write_table(pa.table({"score": part.score, "label": pa.array(part.label, t)}),
                           d / f"part{i}.parquet")
        code, out = cli("threshold", "--input", d)
        assert (code == 0) is ok, out.err
        want = None
        try:
            want = distcal.optimal_threshold(str(d)).threshold
        except distcal.DataError:
            assert not ok
        if ok:
            assert json.loads(out.out)["threshold"] == want
        else:
            assert "int64" in out.err and "int32" in out.err
            assert "the input is read in its first file's types, here the narrower" in out.err
    df.rename(columns={"score": "s.x"}).to_parquet(tmp_path / "dot.parquet")
    assert cli("fit", "--input", tmp_path / "dot.parquet", "--score-col", "s.x", "--output",
               tmp_path / "m")[0] == 0
    assert cli("export", "--model", tmp_path / "m", "--format", "sql", "--dialect", "duckdb",
               "--output", tmp_path / "m.sql")[0] == 0
    sql = (tmp_path / "m.sql").read_text().strip()
    got = duckdb.sql(f'SELECT {sql} FROM (SELECT 0.3 AS "s.x")').fetchall()[0][0]
    assert got == distcal.load(tmp_path / "m").predict([0.3])[0]
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(3), 900)
    pd.DataFrame({"s0": p[:, 0], "s1": p[:, 1], "s2": p[:, 2],
                  "label": rng.integers(0, 3, 900)}).to_parquet(tmp_path / "mc.parquet")
    assert cli("fit", "--input", tmp_path / "mc.parquet", "--score-cols", "s0,s1,s2",
               "--output", tmp_path / "mc")[0] == 0
    code, out = cli("apply", "--model", tmp_path / "mc", "--input", tmp_path / "mc.parquet",
                    "--output", tmp_path / "o.parquet", "--output-col", "score")
    assert code == 0, out.err
    np.testing.assert_array_equal(np.stack(pd.read_parquet(tmp_path / "o.parquet")["score"]),
                                  distcal.load(tmp_path / "mc").predict(p))
    proc = subprocess.Popen([*DISTCAL, "threshold", "--input", str(tmp_path / "dot.parquet"),
                             "--score-col", "s.x"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # as `| true` does, before the line is printed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0 and "Traceback" not in err and "Error" not in err, err


def test_config_dates_are_the_text_written(scores_path, tmp_path):
    """YAML reads an unquoted 2026-12-03 as a date: a string option takes it as written
    (it was refused: "must be a string, got datetime.date(2026, 12, 3)")."""
    path, _ = scores_path
    cfg = tmp_path / "day.yaml"
    cfg.write_text(f"input: {path}\nperiod: 2026-12-03\n")
    r = run("summarize", "--config", cfg, "--output", tmp_path / "s")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["period"] == "2026-12-03"
    assert distcal.load_summary(tmp_path / "s").period == "2026-12-03"
    # a timestamp's text is not Python's (2026-12-03 10:00:00+00:00): quote it
    cfg.write_text(f"input: {path}\nperiod: 2026-12-03T10:00:00Z\n")
    r = run("summarize", "--config", cfg, "--output", tmp_path / "s2")
    assert r.returncode == 2 and "option 'period'" in r.stderr and "must be a string" \
        in r.stderr, r.stderr


def test_advice_in_errors_names_options(scores_path, tmp_path):
    """The library's advice reads as the command line's options, not as API arguments
    ("pass weight_col=None", "pass score= ...")."""
    path, df = scores_path
    r = run("fit", "--input", path, "--output", tmp_path / "m", "--method", "modl",
            "--weight-col", "w")
    assert r.returncode == 2 and "MODL counts rows; it takes no weights (leave out " \
        "--weight-col)" in r.stderr, r.stderr
    rng = np.random.default_rng(0)
    p = rng.dirichlet([1, 1, 1], 300)
    pq.write_table(pa.table({"p": [list(v) for v in p], "label": rng.integers(0, 3, 300)}),
                   tmp_path / "mc.parquet")
    assert run("fit", "--input", tmp_path / "mc.parquet", "--score-col", "p", "--output",
               tmp_path / "mc").returncode == 0
    r = run("export", "--model", tmp_path / "mc", "--format", "sql", "--output",
            tmp_path / "mc.sql")
    assert r.returncode == 2 and "pass --score-cols, the SQL of its elements" in r.stderr, \
        r.stderr
    assert "score=" not in r.stderr and "weight_col" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mc", "mc.parquet", "scores.parquet"]


def test_an_in_process_run_leaves_the_process_as_it_found_it(tmp_path):
    """main() in a caller's process (a notebook, a service): the distcal logger, the
    warnings filters and stderr are the caller's again after each run, -v, -q, a failure.
    Each run added a handler and stopped propagation for good, and -q pointed file
    descriptor 2 at /dev/null while it ran (two at once left it there, sys.stderr closed)."""
    import logging
    import warnings

    from distcal.cli.main import main

    make_scores(500, seed=9).to_parquet(tmp_path / "in.parquet")
    log = logging.getLogger("distcal")

    def state():
        return (log.level, log.propagate, list(log.handlers), list(warnings.filters),
                os.readlink("/proc/self/fd/2"), sys.stderr)

    before = state()
    for i, flags in enumerate((["-v"], ["-q"], [], ["-q", "--label-col", "nope"])):
        code = main(["fit", "--input", str(tmp_path / "in.parquet"), "--output",
                     str(tmp_path / f"m{i}"), *flags])
        assert code == (2 if "nope" in flags else 0)
        assert state() == before, flags
    assert not sys.stderr.closed


def test_library_advice_in_log_lines_speaks_of_options(tmp_path, capsys):
    """The library's warnings name the API's parameters; a command-line run names its
    options instead (it said "pass increasing=True or False" to a shell user)."""
    from distcal.cli.main import main

    rng = np.random.default_rng(3)
    pd.DataFrame({"score": rng.random(400), "label": rng.random(400)}).to_parquet(
        tmp_path / "frac.parquet")
    assert main(["fit", "--input", str(tmp_path / "frac.parquet"), "--output",
                 str(tmp_path / "m"), "--increasing", "auto"]) == 0
    err = capsys.readouterr().err
    assert "--increasing auto with labels that are not all 0/1" in err
    assert "pass --increasing true or false to avoid it" in err
    assert "increasing=" not in err
