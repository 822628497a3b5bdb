"""distcal.monitor: the per-period table against numpy oracles, Holm's correction, the report.

Oracles: Spiegelhalter's z and calibration-in-the-large computed with numpy on
each period's raw rows, and Holm's step-down procedure written out as a loop
(Holm 1979): reject in order of increasing p while p_(i) < alpha / (m - i).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm
from test_report import _chrome

import distcal
from distcal.monitor import COLUMNS

PERIODS = [("2026-12-01", 1.0), ("2026-12-02", 1.0), ("2026-12-03", 1.6),
           ("2026-12-04", 1.0), ("2026-12-05", 2.5)]


def day(k: float, seed: int, n: int = 4000) -> pd.DataFrame:
    """Probabilities p whose true rate is p^k / (p^k + (1 - p)^k): k = 1 is calibrated."""
    rng = np.random.default_rng(seed)
    p = np.round(rng.random(n), 3)
    q = p**k / (p**k + (1 - p) ** k)
    return pd.DataFrame({"score": p, "label": (rng.random(n) < q).astype(int),
                         "w": rng.uniform(0.5, 1.5, n)})


def holm_reject(p: np.ndarray, alpha: float) -> np.ndarray:
    order = np.argsort(p)
    reject = np.zeros(p.shape[0], dtype=bool)
    for i, j in enumerate(order):
        if p[j] < alpha / (p.shape[0] - i):
            reject[j] = True
        else:
            break
    return reject


@pytest.fixture(scope="module")
def frames():
    return [day(k, seed) for seed, (_, k) in enumerate(PERIODS)]


@pytest.fixture(scope="module")
def saved(frames, tmp_path_factory):
    root = tmp_path_factory.mktemp("history")
    paths = []
    for (period, _), df in zip(PERIODS, frames):
        distcal.summarize(df, weight_col="w", period=period).save(root / period)
        paths.append(str(root / period))
    return paths


@pytest.mark.parametrize("alpha,max_ece", [(0.01, None), (0.05, 0.02)])
def test_table_and_alerts_against_numpy_and_holm(frames, saved, alpha, max_ece):
    rep = distcal.monitor(saved, alpha=alpha, max_ece=max_ece)
    t = rep.table
    assert list(t.columns) == list(COLUMNS)
    assert t["period"].tolist() == [p for p, _ in PERIODS]
    zs, ps = [], []
    for row, df in zip(t.itertuples(), frames):
        p, y, w = df["score"].to_numpy(), df["label"].to_numpy(), df["w"].to_numpy()
        z = np.sum(w * (y - p) * (1 - 2 * p)) / np.sqrt(np.sum(w**2 * (1 - 2 * p)**2 * p * (1 - p)))
        zs.append(z)
        ps.append(2 * norm.sf(abs(z)))
        assert row.spiegelhalter_z == pytest.approx(z, rel=1e-9)
        assert row.n_rows == len(df) and row.weight == pytest.approx(w.sum(), rel=1e-12)
        assert row.base_rate == pytest.approx(np.sum(w * y) / w.sum(), rel=1e-9)
        assert row.mean_prob == pytest.approx(np.sum(w * p) / w.sum(), rel=1e-9)
        assert row.citl == pytest.approx(row.mean_prob - row.base_rate, abs=1e-12)
        assert row.citl_low < row.citl < row.citl_high
        ev = distcal.evaluate(df, prob_col="score", weight_col="w")
        assert (row.ece, row.smooth_ece, row.auc, row.brier, row.log_loss) == pytest.approx(
            (ev.ece, ev.smece, ev.auc, ev.brier, ev.log_loss), rel=1e-9)
    want = holm_reject(np.array(ps), alpha)
    if max_ece is not None:
        want |= t["ece"].to_numpy() > max_ece
    assert t["alert"].tolist() == want.tolist()
    assert rep.alerts["period"].tolist() == [p for p, a in zip(t["period"], want) if a]
    assert "2026-12-05" in rep.alerts["period"].tolist()  # strongly miscalibrated
    assert not t["alert"][[0, 1, 3]].any() or max_ece is not None


def test_monitor_is_the_same_on_every_engine(saved, engine):
    got = distcal.monitor(saved[:3], engine=engine).table
    want = distcal.monitor(saved[:3]).table
    pd.testing.assert_frame_equal(got, want, rtol=1e-9, atol=1e-12)


@pytest.fixture(params=["dask", "spark"])
def engine(request):
    request.getfixturevalue("client" if request.param == "dask" else "spark")
    return request.param


def test_hard_predictions_that_are_wrong_alert(frames):
    """Probabilities only 0, 1/2 and 1: Spiegelhalter's variance is 0. A label the model
    calls impossible (1 at p = 0, 0 at p = 1) is then |z| = inf and p = 0, and the
    period alerts; where every such label is right the statistic is 0/0: NaN."""
    rng = np.random.default_rng(0)
    p = rng.choice([0.0, 0.5, 1.0], 1000)
    right = np.where(p == 0.5, rng.integers(0, 2, 1000), p).astype(int)
    wrong = np.where(rng.random(1000) < 0.3, 1 - right, right)
    report = distcal.monitor([distcal.summarize(frames[0]),
                              distcal.summarize(pd.DataFrame({"score": p, "label": wrong})),
                              distcal.summarize(pd.DataFrame({"score": p, "label": right}))])
    table = report.table
    num = np.sum((wrong - p) * (1 - 2 * p))  # the numerator of Z (numpy, the raw rows)
    assert num > 0 and table.spiegelhalter_z[1] == np.inf
    assert table.spiegelhalter_p[1] == 0.0 and bool(table.alert[1])
    assert np.isnan(table.spiegelhalter_z[2]) and not table.alert[2]
    rep = distcal.evaluate(pd.DataFrame({"score": p, "label": wrong}), prob_col="score")
    assert rep.spiegelhalter_z == np.inf and rep.spiegelhalter_p == 0.0


def test_bad_parameters_fail_before_reading(saved):
    for kw in ({"alpha": 0}, {"alpha": 1.5}, {"max_ece": -1}, {"max_ece": float("nan")}):
        with pytest.raises(ValueError):
            distcal.monitor(saved, **kw)
    with pytest.raises(ValueError, match="list"):
        distcal.monitor(saved[0])
    with pytest.raises(ValueError, match="list"):
        distcal.monitor([])


def test_report_json_html_and_browser(saved, tmp_path):
    rep = distcal.monitor(saved, alpha=0.01, max_ece=0.05)
    out = rep.save(tmp_path / "monitor")
    assert {p.name for p in out.iterdir()} == {"report.json", "report.html"}
    doc = json.loads((out / "report.json").read_text())
    assert list(doc["table"]) == list(COLUMNS)
    assert doc["alerts"] == rep.alerts["period"].tolist()
    assert doc["table"]["spiegelhalter_z"] == pytest.approx(rep.table["spiegelhalter_z"].tolist())
    with pytest.raises(Exception, match="exists"):
        rep.save(tmp_path / "monitor")
    rep.save(tmp_path / "monitor", overwrite=True)
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 5 and 'src="http' not in page
    for fig in ("citl", "ece", "auc", "z", "rows"):
        assert f'id="fig-{fig}"' in page
    driver = _chrome(tmp_path)
    try:
        for width, height in ((412, 915), (1280, 900)):
            driver.set_window_size(width, height)
            driver.get((out / "report.html").as_uri())
            # decode() settles once the image is decoded (or fails to be): no race
            # with a loaded machine, unlike reading `complete` right after get().
            n_img, decoded = driver.execute_async_script(
                "const done = arguments[arguments.length - 1], i = [...document.images];"
                "Promise.all(i.map(x => x.decode().then(() => 1, () => 0)))"
                ".then(r => done([i.length, r.reduce((a, b) => a + b, 0)]))")
            assert n_img == decoded == 5
            scroll_w, inner_w = driver.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth]")
            assert scroll_w <= inner_w, f"horizontal overflow at {width}px"
            rows = driver.execute_script(
                "return [...document.querySelectorAll('#periods tbody tr')].map("
                "r => r.className)")
            assert rows == ["alert" if a else "" for a in rep.table["alert"]]
        assert driver.get_log("browser") == []
        net = [json.loads(e["message"])["message"]["params"].get("request", {}).get("url", "")
               for e in driver.get_log("performance")]
        assert not [u for u in net if u.split(":", 1)[0] in ("http", "https", "ws", "wss")]
    finally:
        driver.quit()


def test_evaluation_report_shows_spiegelhalter_and_citl(frames, tmp_path):
    from distcal.report import write_report

    ev = distcal.evaluate(frames[4], prob_col="score", weight_col="w")
    out = write_report([ev], tmp_path / "rep")
    doc = json.loads((out / "report.json").read_text())
    keys = {row["key"]: row["values"]["score"] for row in doc["table"]}
    for k in ("spiegelhalter_z", "spiegelhalter_p", "citl", "citl_low", "citl_high"):
        assert keys[k] == pytest.approx(getattr(ev, k), rel=1e-12) and doc[k] == keys[k]
    page = (out / "report.html").read_text()
    assert 'data-key="spiegelhalter_z"' in page and "Spiegelhalter" in page
