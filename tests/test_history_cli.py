"""summarize, fit --summaries and monitor on the command line and in both jobs.

Real subprocesses on real Parquet files: the ``distcal`` command, the Spark
job under the real spark-submit, the Dask job with its own local cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_monitor import day
from test_spark_jobs import submit

import distcal

ROOT = Path(__file__).resolve().parents[1]
DISTCAL = [sys.executable, "-m", "distcal"]
KS = [1.0, 1.0, 2.5]  # the third day is miscalibrated


def run(*args):
    return subprocess.run([*DISTCAL, *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def dask_job(*args):
    return subprocess.run([sys.executable, str(ROOT / "jobs" / "dask_calibrate.py"),
                           *map(str, args)], capture_output=True, text=True, timeout=600)


def spark_job(tmp):
    return lambda *args: submit(tmp, *args)


def line(r):
    """The one JSON line of a run (the last line of stdout)."""
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def daily(tmp_path):
    frames = []
    for i, k in enumerate(KS):
        df = day(k, seed=40 + i, n=3000).assign(g=lambda d: np.where(d.index % 3, "x", "y"))
        df.to_parquet(tmp_path / f"day{i}.parquet", index=False)
        frames.append(df)
    return frames


@pytest.mark.parametrize("how", ["cli", "dask-job", "spark-job"])
def test_summarize_fit_from_summaries_and_monitor(daily, tmp_path, how, request):
    """The history's subcommands, each as its own process. The command line summarizes
    the three days; the jobs fit from and monitor summaries that the library wrote
    (each job start is a JVM or a Dask cluster; both jobs' ``summarize`` runs on every
    logical date of the daily DAGs, tests/test_airflow.py)."""
    runner = {"cli": run, "dask-job": dask_job}.get(how) or spark_job(tmp_path)
    sums = []
    for i in range(len(KS)):
        out = tmp_path / f"s{i}"
        sums.append(out)
        if how != "cli":
            distcal.summarize(daily[i], weight_col="w", by="g", decimals=2,
                              period=f"2026-12-0{i + 1}").save(out)
            continue
        r = runner("summarize", "--input", tmp_path / f"day{i}.parquet", "--output", out,
                   "--period", f"2026-12-0{i + 1}", "--decimals", "2", "--weight-col", "w",
                   "--by", "g")
        assert r.returncode == 0, r.stderr[-3000:]
        got = line(r)
        assert got["period"] == f"2026-12-0{i + 1}" and got["n_rows"] == 3000
        assert got["distinct"] <= 3 * 101 and got["by"] == ["g"] and got["decimals"] == 2
        assert distcal.load_summary(out) == distcal.summarize(
            daily[i], weight_col="w", by="g", decimals=2, period=f"2026-12-0{i + 1}")
    r = runner("fit", "--summaries", *sums, "--output", tmp_path / "model", "--method",
               "histogram", "--n-bins", "7")
    assert r.returncode == 0, r.stderr[-3000:]
    assert line(r)["summaries"] == 3 and line(r)["n_rows"] == 9000
    rows = pd.concat(daily, ignore_index=True).assign(score=lambda d: np.round(d["score"], 2))
    want = distcal.fit(rows, method="histogram", n_bins=7, weight_col="w", by="g")
    got = distcal.load(tmp_path / "model")
    q = np.linspace(0, 1, 501)
    keys = np.array(["x", "y", "z"])[np.arange(501) % 3]
    np.testing.assert_allclose(got.predict(q, segments=keys), want.predict(q, segments=keys),
                               rtol=1e-9, atol=1e-12)
    r = runner("monitor", "--summaries", *sums, "--output", tmp_path / "mon",
               "--fail-on-alert")
    assert r.returncode == 3, r.stderr[-3000:]
    assert line(r)["alerts"] == ["2026-12-03"] and line(r)["n_alerts"] == 1
    assert (tmp_path / "mon" / "report.html").exists()
    if how == "cli":  # (the exit status without alerts is the command line's, not a job's)
        r = runner("monitor", "--summaries", *sums[:2], "--output", tmp_path / "mon2",
                   "--fail-on-alert", "--alpha", "0.001")
        assert r.returncode == 0 and line(r)["alerts"] == []


def test_usage_and_bad_input_exit_2_and_write_nothing(daily, tmp_path, capsys):
    """In this process (main(), what the ``distcal`` command runs): a new interpreter per
    case would only repeat the imports; the commands' processes are above."""
    from distcal.cli.main import main

    def cli(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    src = tmp_path / "day0.parquet"
    assert cli("summarize", "--input", src, "--output", tmp_path / "s")[0] == 0
    code, _, err = cli("summarize", "--input", src, "--output", tmp_path / "s")
    assert code == 2 and "--overwrite" in err
    assert cli("summarize", "--input", src, "--output", tmp_path / "s", "--overwrite")[0] == 0
    code, _, err = cli("fit", "--summaries", tmp_path / "s", "--input", src, "--output",
                       tmp_path / "m")
    assert code == 2 and "--summaries replaces --input" in err
    code, _, err = cli("fit", "--summaries", tmp_path / "s", tmp_path, "--output",
                       tmp_path / "m")
    assert code == 2 and "not a distcal summary" in err
    code, _, err = cli("fit", "--input", tmp_path / "s", "--output", tmp_path / "m")
    assert code == 2 and "is a saved summary, not a table of rows: pass it with " \
        "--summaries" in err
    # The column options name the summaries' own columns: another one is refused, as the
    # library refuses it (it was ignored: an unweighted model for --weight-col w).
    for opt, col in (("--weight-col", "w"), ("--label-col", "y"), ("--score-col", "p")):
        code, _, err = cli("fit", "--summaries", tmp_path / "s", opt, col, "--output",
                           tmp_path / "m")
        assert code == 2 and f"={col!r}" in err and "leave" in err, (opt, err)
    code, _, err = cli("monitor", "--summaries", tmp_path / "s", "--output",
                       tmp_path / "s" / "rep")
    assert code == 2 and "inside" in err
    bad = daily[0].assign(label=np.r_[5, daily[0]["label"][1:]])
    bad.to_parquet(tmp_path / "bad.parquet", index=False)
    code, _, err = cli("summarize", "--input", tmp_path / "bad.parquet", "--output",
                       tmp_path / "b")
    assert code == 2 and "column 'label'" in err and "1 row" in err
    assert "pass --on-invalid drop to drop such rows" in err  # the command line's words
    # ... and fit --summaries takes it: infinite scores summarised, dropped by sigmoid
    inf = daily[0].assign(score=np.r_[[np.inf] * 3, daily[0]["score"][3:]])
    inf.to_parquet(tmp_path / "inf.parquet", index=False)
    assert cli("summarize", "--input", tmp_path / "inf.parquet", "--output",
               tmp_path / "si")[0] == 0
    code, _, err = cli("fit", "--summaries", tmp_path / "si", "--method", "sigmoid",
                       "--output", tmp_path / "msig")
    assert code == 2 and "3 rows are infinite" in err
    code, out, err = cli("fit", "--summaries", tmp_path / "si", "--method", "sigmoid",
                         "--on-invalid", "drop", "--output", tmp_path / "msig")
    assert code == 0, err
    assert distcal.load(tmp_path / "msig") == distcal.fit(inf, method="sigmoid",
                                                          on_invalid="drop")
    assert cli("summarize", "--input", src, "--output", tmp_path / "d", "--decimals",
               "-2")[0] == 2
    # a window of summaries named in a file (@FILE, one argument a line), as a scheduler writes
    (tmp_path / "window.args").write_text(f"--summaries\n{tmp_path / 's'}\n")
    code, out, err = cli("fit", f"@{tmp_path / 'window.args'}", "--output", tmp_path / "w")
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["summaries"] == 1, err
    # its JSON line is that of the fit of the rows (blocks, ...), plus the summaries' count
    code, rows_out, err = cli("fit", "--input", src, "--output", tmp_path / "wr")
    from_rows = json.loads(rows_out.strip().splitlines()[-1])
    from_summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and from_rows["blocks"] > 0, err
    assert {k: v for k, v in from_summary.items() if k not in ("summaries", "model")} == \
        {k: v for k, v in from_rows.items() if k != "model"}
    # a summary saved without --period is named by its directory among the alerts
    assert cli("summarize", "--input", tmp_path / "day2.parquet", "--output",
               tmp_path / "s2")[0] == 0
    code, out, err = cli("monitor", "--summaries", tmp_path / "s", tmp_path / "s2",
                         "--output", tmp_path / "mon-np")
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["alerts"] == [
        str(tmp_path / "s2")], err
    # ... or at a URL, where a scheduler writes it beside data on a store (fsspec)
    url = (tmp_path / "window.args").as_uri()
    code, out, err = cli("fit", f"@{url}", "--output", tmp_path / "wu")
    assert code == 0 and distcal.load(tmp_path / "wu") == distcal.load(tmp_path / "w"), err
    code, _, err = cli("fit", f"@{url}.missing", "--output", tmp_path / "wm")
    assert code == 2 and "cannot read the arguments there" in err
    for path in ("m", "b", "d", "s/rep", "wm"):
        assert not (tmp_path / path).exists()
    for sub in ("summarize", "monitor"):
        with pytest.raises(SystemExit):
            main([sub, "--help"])
        help_text = capsys.readouterr().out
        assert "--output" in help_text and "(default" in help_text
