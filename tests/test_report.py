"""The evaluation report: figures, embedded images, numbers, and a real browser."""

from __future__ import annotations

import io
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure  # noqa: E402

import distcal
from distcal import plots
from distcal.core import calibration_metrics as cm
from distcal.report import build_document, format_value, report_html_fragment, write_report

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def _frame(n: int = 20_000, seed: int = 8, weights: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = rng.beta(2, 3, n)
    y = (rng.random(n) < s ** 1.5).astype(int)
    df = pd.DataFrame({"score": np.round(s, 3), "label": y})
    if weights:
        df["w"] = rng.uniform(0.2, 3.0, n)
    return df


@pytest.fixture(scope="module")
def fitted():
    df = _frame()
    model = distcal.fit(df, method="isotonic")
    df["calibrated"] = model.predict(df["score"])
    # a coarse re-rounding of the score loses ranking, hence AUC
    df["coarse"] = np.round(df["score"], 1)
    reports = distcal.evaluate_many(df, ["score", "calibrated", "coarse"])
    return df, model, reports


@pytest.fixture(scope="module")
def written(fitted, tmp_path_factory):
    df, model, reports = fitted
    out = tmp_path_factory.mktemp("rep") / "report"
    write_report(reports, out, model=model, cost_fp=1.0, cost_fn=3.0,
                 provenance={"input": "scores.parquet", "engine": "local",
                             "label_col": "label", "model_dir": "/nonexistent/model",
                             "model_checksum": "abc123"})
    return out


class _Cells(HTMLParser):
    """Collects <img> sources, links, table cells and provenance values."""

    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[str] = []
        self.links: list[str] = []
        self.cells: list[tuple[str, str, str]] = []
        self.prov: list[tuple[str, str]] = []
        self.figures = 0
        self._cur: tuple | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "figure":
            self.figures += 1
        for k in ("href", "src", "action", "srcset", "data"):
            if k in a and tag != "img":
                self.links.append(a[k])
        if tag == "td" and "data-key" in a:
            self._cur, self._text = ("td", a["data-key"], a["data-col"]), []
        if tag == "dd" and "data-prov" in a:
            self._cur, self._text = ("dd", a["data-prov"]), []

    def handle_data(self, data):
        if self._cur is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if self._cur is not None and tag in ("td", "dd"):
            text = "".join(self._text)
            if self._cur[0] == "td":
                self.cells.append((self._cur[1], self._cur[2], text))
            else:
                self.prov.append((self._cur[1], text))
            self._cur = None


def _parse(path: Path) -> _Cells:
    p = _Cells()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_files_figures_and_embedded_images(written) -> None:
    from PIL import Image

    names = {p.name for p in written.iterdir()}
    assert names == {"report.json", "report.html", "reliability.png", "roc.png", "cost.png",
                     "calibration_map.png"}
    page = _parse(written / "report.html")
    assert page.figures == 4 and len(page.imgs) == 4
    assert all(s.startswith("data:image/png;base64,") for s in page.imgs)
    assert page.links == []  # no stylesheet, script, link or anchor to anything
    text = (written / "report.html").read_text()
    assert 'src="http' not in text and "href=" not in text and "<script" not in text
    assert '<meta name="viewport"' in text
    for name in ("reliability.png", "roc.png", "cost.png", "calibration_map.png"):
        img = Image.open(written / name)
        img.load()
        assert img.size[0] >= 600 and img.size[1] >= 450
        assert np.asarray(img.convert("L")).std() > 10  # not blank


def test_figure_count_without_model(fitted, tmp_path) -> None:
    _, _, reports = fitted
    write_report([reports["score"]], tmp_path / "r")
    page = _parse(tmp_path / "r" / "report.html")
    assert page.figures == 3
    assert not (tmp_path / "r" / "calibration_map.png").exists()


def test_marker_area_proportional_to_bin_weight(fitted) -> None:
    _, _, reports = fitted
    fig = Figure()
    ax, hx = fig.subplots(2, 1)
    plots.plot_reliability(list(reports.values()), ax, hist_ax=hx)
    wmax = max(r.calibration_curve["weight"].max() for r in reports.values())
    seen = 0
    for coll in ax.collections:
        gid = coll.get_gid() or ""
        if not gid.startswith("bins:"):
            continue
        weight = reports[gid[5:]].calibration_curve["weight"].to_numpy()
        sizes = coll.get_sizes()
        assert sizes.shape == weight.shape
        np.testing.assert_allclose(sizes / weight, plots.MARKER_AREA_MAX / wmax, rtol=1e-12)
        np.testing.assert_allclose(coll.get_offsets()[:, 0],
                                   reports[gid[5:]].calibration_curve["prob_pred"])
        seen += 1
    assert seen == 3
    assert max(c.get_sizes().max() for c in ax.collections
               if (c.get_gid() or "").startswith("bins:")) == pytest.approx(plots.MARKER_AREA_MAX)
    assert hx.get_yscale() == "log"
    assert hx.get_legend() is not None and ax.get_legend() is not None
    # the log axis's labels are plain text (matplotlib's default $10^{1}$ showed raw in
    # every report's PNG while the report read all text as written)
    fig.savefig(io.BytesIO(), format="png")
    labels = [t.get_text() for t in hx.get_yticklabels() + hx.get_yticklabels(minor=True)]
    assert any(labels) and not any("$" in t for t in labels), labels


@pytest.mark.parametrize("cost_fp,cost_fn,weights,scale", [
    (1, 1, False, 1.0), (1, 3, False, 1.0), (2.5, 1, True, 1.0), (1, 20, True, 1.0),
    (1, 1, True, 1e-15), (3, 1, True, 1e12)])
def test_cost_curve_minimum_is_optimal_threshold(cost_fp, cost_fn, weights, scale) -> None:
    """(Weights of 1e-15 made every cost a tie with nothing predicted positive.)"""
    df = _frame(5000, seed=3, weights=weights)
    if scale != 1.0:
        df["w"] *= scale
    wc = "w" if weights else None
    report = distcal.evaluate(df, prob_col="score", weight_col=wc)
    want = distcal.optimal_threshold(df, score_col="score", weight_col=wc, cost_fp=cost_fp,
                                     cost_fn=cost_fn)
    curve = cm.cost_curve(report, cost_fp, cost_fn)
    assert curve["best_threshold"] == want.threshold
    assert curve["best_cost"] == pytest.approx(want.cost, rel=1e-9)
    assert curve["best_fp"] == pytest.approx(want.fp, rel=1e-9, abs=1e-9)
    assert curve["best_fn"] == pytest.approx(want.fn, rel=1e-9, abs=1e-9)
    # the drawn curve: its lowest point and the marker sit at the returned threshold
    fig = Figure()
    ax = plots.plot_cost_curve(report, fig.subplots(), cost_fp=cost_fp, cost_fn=cost_fn)
    line = next(ln for ln in ax.lines if ln.get_gid() == "cost:score")
    assert np.min(line.get_ydata()) == pytest.approx(want.cost, rel=1e-9)
    marker = next(ln for ln in ax.lines if ln.get_gid() == "best:score")
    assert marker.get_xdata()[0] == pytest.approx(min(want.threshold, 1.0))
    assert marker.get_ydata()[0] == pytest.approx(want.cost, rel=1e-9)
    # brute force on the rows: cost of "positive iff p >= t" at every distinct t
    w = df["w"].to_numpy() if weights else np.ones(len(df))
    s, y = df["score"].to_numpy(), df["label"].to_numpy()
    costs = {t: cost_fp * w[(s >= t) & (y == 0)].sum() + cost_fn * w[(s < t) & (y == 1)].sum()
             for t in np.unique(s)}
    assert min(costs.values()) == pytest.approx(want.cost, rel=1e-9)


def test_json_has_every_number_shown(written) -> None:
    doc = json.loads((written / "report.json").read_text())
    page = _parse(written / "report.html")
    rows = {row["key"]: row for row in doc["table"]}
    assert len(page.cells) == len(rows) * len(doc["columns"])
    for key, col, text in page.cells:
        row = rows[key]
        value = row["values"][col]  # null: the reason says which number the page shows
        if value is None and col in row.get("why_null", {}):
            value = {"+infinity": np.inf, "-infinity": -np.inf}.get(row["why_null"][col])
        assert format_value(value, row["kind"]) == text, (key, col)
    assert {k for k, _ in page.prov} == set(doc["provenance"])
    for k, text in page.prov:
        v = doc["provenance"][k]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert text.replace(",", "") == format_value(v, "count" if k in (
                "rows_used", "rows_dropped", "n_bins", "model_rows") else
                "weight" if k == "weight_total" else "metric").replace(",", "")
        elif isinstance(v, list):
            assert text == ", ".join(map(str, v))
        else:
            assert text == str(v)
    assert doc["provenance"]["model_checksum"] == "abc123"
    assert doc["provenance"]["rows_used"] == 20_000
    assert doc["costs"] == {"cost_fp": 1.0, "cost_fn": 3.0}
    # the table's numbers are the reports' own
    for col, rep in doc["reports"].items():
        assert rows["brier"]["values"][col] == rep["brier"]
        assert rows["smece"]["values"][col] == rep["extra"]["smece"]
        assert rows["best_threshold"]["values"][col] == rep["cost_curve"]["best_threshold"]
        e = rep["extra"]
        assert e["brier"] == pytest.approx(e["reliability"] - e["resolution"] + e["uncertainty"],
                                           abs=1e-12)
        assert rep["brier"] == pytest.approx(e["brier"], abs=1e-12)


def test_auc_drop_is_noted(fitted, written) -> None:
    _, _, reports = fitted
    doc = json.loads((written / "report.json").read_text())
    drops = {n["column"]: n for n in doc["notes"] if n["kind"] == "auc_drop"}
    assert reports["coarse"].auc < reports["score"].auc
    assert "coarse" in drops and drops["coarse"]["baseline"] == "score"
    assert drops["coarse"]["auc"] == reports["coarse"].auc
    text = (written / "report.html").read_text()
    assert 'interpolation=&quot;centered&quot;' in text
    assert set(drops) == {r.prob_col for r in reports.values()
                          if r.auc < reports["score"].auc}


def test_no_note_without_a_drop(fitted) -> None:
    _, _, reports = fitted
    doc = build_document([reports["score"]])
    assert doc["json"]["notes"] == [] and 'class="note"' not in doc["html"]


def test_calibration_map_plots() -> None:
    df = _frame(3000, seed=4)
    iso = distcal.fit(df, method="isotonic")
    ax = plots.plot_calibration_map(iso, Figure().subplots())
    hl = [c for c in ax.collections if c.__class__.__name__ == "LineCollection"]
    assert sum(len(c.get_segments()) for c in hl) == len(iso.blocks)
    x, y = ax.lines[0].get_data()
    np.testing.assert_allclose(y, iso.predict(x))
    sig = distcal.fit(df, method="sigmoid")
    ax = plots.plot_calibration_map(sig, Figure().subplots())
    x, y = ax.lines[0].get_data()
    np.testing.assert_allclose(y, sig.predict(x))


def test_roc_plot_and_fragment(fitted) -> None:
    _, _, reports = fitted
    ax = plots.plot_roc(reports, Figure().subplots())
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    for r in reports.values():
        assert f"{r.prob_col} (AUC {r.auc:.4f})" in labels
    frag = report_html_fragment(reports["score"])
    assert frag.startswith('<div class="distcal-report">') and "<html" not in frag
    assert frag.count("data:image/png;base64,") == 3 and 'src="http' not in frag


def _chrome(tmp_path: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for exe in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
        assert Path(exe).exists(), f"{exe} missing: apt-get install -y chromium chromium-driver"
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


@pytest.mark.slow
def test_renders_in_chromium(written, tmp_path) -> None:
    """Headless Chromium: no console message, no request but the file and its
    data: images, every image decoded, no horizontal scrolling on a phone."""
    import selenium  # noqa: F401  (dev extra: installed by make; never skipped)
    driver = _chrome(tmp_path)
    shots = []
    try:
        for name, (width, height) in {"phone": (412, 915), "desktop": (1280, 900)}.items():
            driver.set_window_size(width, height)
            driver.get((written / "report.html").as_uri())
            assert driver.execute_script("return document.readyState") == "complete"
            # decode() settles once the image is decoded (or fails to be): no race
            # with a loaded machine, unlike reading `complete` right after get().
            n_img, decoded = driver.execute_async_script(
                "const done = arguments[arguments.length - 1], i = [...document.images];"
                "Promise.all(i.map(x => x.decode().then(() => 1, () => 0)))"
                ".then(r => done([i.length, r.reduce((a, b) => a + b, 0)]))")
            assert n_img == decoded == 4
            scroll_w, inner_w = driver.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth]")
            assert scroll_w <= inner_w, f"horizontal overflow at {width}px"
            assert driver.find_element("id", "metrics").is_displayed()
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(width, min(height + 120, 16000))
            shot = tmp_path / f"report-{name}.png"
            assert driver.save_screenshot(str(shot))
            shots.append(shot)
        console = driver.get_log("browser")
        assert console == [], console
        ours, everything = [], []
        for entry in driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg["method"] == "Network.requestWillBeSent":
                url = msg["params"]["request"]["url"]
                everything.append(url)
                if msg["params"].get("documentURL", "").startswith("file://"):
                    ours.append(url)
        assert ours, "no request of the page recorded: the performance log is not working"
        # the page loads itself and its data: images, nothing else
        bad = [u for u in ours if not (u.startswith("file://") or u.startswith("data:"))]
        assert bad == [], bad
        # and nothing at all (the browser's own pages included) went to the network
        net = [u for u in everything if u.split(":", 1)[0] in ("http", "https", "ws", "wss")]
        assert net == [], net
    finally:
        driver.quit()
    ARTIFACTS.mkdir(exist_ok=True)
    for shot in shots:
        shutil.copy(shot, ARTIFACTS / shot.name)
    from PIL import Image

    img = Image.open(shots[0])
    assert img.size[0] >= 400 and np.asarray(img.convert("L")).std() > 10


def test_report_to_an_fsspec_url_is_written_there(fitted, tmp_path, monkeypatch):
    """A URL is a store, not a local directory named 'memory:' (as a model's save)."""
    import fsspec

    _, _, reports = fitted
    monkeypatch.chdir(tmp_path)
    url = "memory://distcal-report-test/rep"
    write_report(list(reports.values()), url)
    try:
        fs = fsspec.filesystem("memory")
        names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls("/distcal-report-test/rep",
                                                             detail=False))
        assert names == ["cost.png", "reliability.png", "report.html", "report.json",
                         "roc.png"]
        doc = json.loads(fs.cat("/distcal-report-test/rep/report.json"))
        assert doc["columns"] == ["score", "calibrated", "coarse"]
        assert list(tmp_path.iterdir()) == []  # nothing local
        with pytest.raises(FileExistsError, match="exists"):
            write_report(list(reports.values()), url)
    finally:
        fsspec.filesystem("memory").rm("/distcal-report-test", recursive=True)


def test_dollar_signs_in_names_keys_and_periods_are_text(tmp_path) -> None:
    """Column names, segment keys and periods holding "$...$" are written as they are in
    the figures (matplotlib read them as math: "$\\frac$" raised, so no report at all),
    their dollars escaped one by one: matplotlib's global text.parse_math, which a report
    turned off while it drew, stays as it was (another thread's figures share it)."""
    import html

    import matplotlib

    from distcal.plots import as_written

    weird = "cost $\\frac$ band"
    df = pd.DataFrame({"p $x$": [0.1, 0.6, 0.8, 0.3] * 4, "label": [0, 1, 1, 0] * 4,
                       "seg": [weird] * 8 + ["US$ 10 - US$ 20"] * 8})
    write_report(distcal.evaluate(df, prob_col="p $x$", by="seg"), tmp_path / "r")
    page = (tmp_path / "r" / "report.html").read_text()
    assert html.escape(weird) in page and "p $x$" in page
    assert (tmp_path / "r" / "segments_reliability.png").stat().st_size > 1000
    summaries = [distcal.summarize(df.rename(columns={"p $x$": "score"}), period=p)
                 for p in ("wk $\\frac$", "wk 2")]
    distcal.monitor(summaries).save(tmp_path / "m")
    assert "wk $\\frac$" in (tmp_path / "m" / "report.html").read_text()
    assert matplotlib.rcParams["text.parse_math"] is True
    assert as_written("US$ 10 - US$ 20") == "US\\$ 10 - US\\$ 20"


def test_an_infinite_best_threshold_shows_as_infinity_and_says_why(tmp_path) -> None:
    """One class (every label 0): the cost-optimal threshold is +inf, predict nothing
    positive. The page shows ∞ (it showed "—", a missing value) and report.json's null
    has its reason."""
    df = pd.DataFrame({"prob": [0.1, 0.4, 0.6, 0.8], "label": [0, 0, 0, 0]})
    doc = build_document([distcal.evaluate(df)])
    row = next(r for r in doc["json"]["table"] if r["key"] == "best_threshold")
    assert row["values"]["prob"] is None and row["why_null"] == {"prob": "+infinity"}
    assert '<td data-key="best_threshold" data-col="prob">∞</td>' in doc["html"]


@pytest.mark.parametrize("costs", [(float("nan"), 1.0), (1.0, float("inf")), ("1", 1.0)])
def test_costs_that_are_not_finite_numbers_are_a_parameter_error(fitted, costs) -> None:
    """(A NaN cost was an IndexError from inside the cost curve.)"""
    _, _, reports = fitted
    with pytest.raises(distcal.ParameterError, match="cost_f[pn] must be a finite number"):
        build_document([reports["score"]], cost_fp=costs[0], cost_fn=costs[1])
    with pytest.raises(distcal.ParameterError, match="cost_f[pn] must be a finite number"):
        plots.plot_cost_curve(reports["score"], Figure().subplots(), cost_fp=costs[0],
                              cost_fn=costs[1])


def test_reports_of_one_column_name_are_refused_until_told_apart(fitted) -> None:
    """Train and test reports of one column 'score': the page showed the second's
    numbers twice and report.json kept one."""
    import dataclasses

    _, _, reports = fitted
    train = reports["score"]
    test = dataclasses.replace(train, brier=train.brier + 0.1)
    with pytest.raises(distcal.ParameterError, match=r"several reports are of the column"):
        build_document([train, test])
    doc = build_document([train, dataclasses.replace(test, prob_col="test")])
    assert doc["json"]["columns"] == ["score", "test"]
    assert doc["json"]["reports"]["test"]["brier"] == pytest.approx(train.brier + 0.1)
