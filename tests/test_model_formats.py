"""One model format: every model saves as version 2; older directories load and predict exactly.

tests/fixtures/models_0_1 were written by distcal 0.1's own code (binary,
multiclass and segmented models of every method), with its predictions on
probe scores saved beside them (expected.json). tests/fixtures/models_v1 are
binary models of every method in format ``distcal-model`` version 1, written
by the last code that wrote it (commit 8967d3f, distcal 0.2.0 in
development), with their predictions (and Venn-Abers intervals) on probe
scores, and two dropped rows each.
"""

import json
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import distcal
from distcal import CalibrationModel, KeyedModel

FIXTURES = Path(__file__).parent / "fixtures" / "models_0_1"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
PROBE = EXPECTED["probe"]
V1 = Path(__file__).parent / "fixtures" / "models_v1"
V1_EXPECTED = json.loads((V1 / "expected.json").read_text())


def _format(root: Path) -> tuple[str, int]:
    meta = json.loads((root / "model.json").read_text())
    return meta["format"], meta["format_version"]


def _nan(values: list) -> np.ndarray:
    return np.asarray([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def assert_same_binary(back: CalibrationModel, model: CalibrationModel, probe: np.ndarray
                       ) -> None:
    """``back`` is ``model``: every attribute, and bit for bit the same predictions."""
    assert type(back) is CalibrationModel
    assert (back.method, back.params, back.columns, back.n_rows, back.weight_total,
            back.dropped_rows) == (model.method, model.params, model.columns, model.n_rows,
                                   model.weight_total, model.dropped_rows)
    assert back == model and repr(back) == repr(model) and back.describe() == model.describe()
    for attr in ("blocks", "steps"):
        try:
            want = getattr(model, attr)
        except AttributeError:
            with pytest.raises(AttributeError):
                getattr(back, attr)
        else:
            pd.testing.assert_frame_equal(getattr(back, attr), want, check_exact=True)
    np.testing.assert_array_equal(back.predict(probe), model.predict(probe))
    if model.method == "venn_abers":
        np.testing.assert_array_equal(np.stack(back.predict_interval(probe)),
                                      np.stack(model.predict_interval(probe)))


@pytest.mark.parametrize("name", sorted(EXPECTED["predictions"]))
def test_0_1_models_load_and_predict_as_before(name, tmp_path):
    model = distcal.load(FIXTURES / name)
    want = np.asarray(EXPECTED["predictions"][name], dtype=np.float64)
    if name.startswith("multiclass"):
        got = model.predict(np.asarray(PROBE["matrix"]))
    elif name.startswith("segmented"):
        got = model.predict(np.asarray(PROBE["scores"]), segments=PROBE["segments"])
    else:
        got = model.predict(np.asarray(PROBE["scores"]))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    # Saved again, it is written in today's format and reads back equal.
    model.save(tmp_path / "again")
    back = distcal.load(tmp_path / "again")
    assert back == model
    assert _format(tmp_path / "again") == ("distcal-keyed-model", 2)
    assert isinstance(back, CalibrationModel if name.startswith("binary") else KeyedModel)


@pytest.mark.parametrize("name", sorted(V1_EXPECTED["predictions"]))
def test_format_1_binary_models_load_and_predict_as_before(name, tmp_path):
    assert _format(V1 / name) == ("distcal-model", 1)
    model = distcal.load(V1 / name)
    assert type(model) is CalibrationModel and model.dropped_rows == V1_EXPECTED["dropped_rows"]
    probe = _nan([float(v) if isinstance(v, str) else v for v in V1_EXPECTED["probe"]])
    np.testing.assert_array_equal(model.predict(probe), _nan(V1_EXPECTED["predictions"][name]))
    if name in V1_EXPECTED["intervals"]:
        np.testing.assert_array_equal(np.stack(model.predict_interval(probe)),
                                      np.stack([_nan(p) for p in V1_EXPECTED["intervals"][name]]))
    model.save(tmp_path / "again")
    assert _format(tmp_path / "again") == ("distcal-keyed-model", 2)
    assert_same_binary(distcal.load(tmp_path / "again"), model, probe)


def _rows(n: int = 800, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = np.round(rng.random(n), 3)  # ties
    df = pd.DataFrame({"s": s, "y": (rng.random(n) < s).astype(np.float64),
                       "w": rng.uniform(0.5, 2.0, n)})
    df.loc[[4, 9, 11], "y"] = np.nan  # dropped: the model counts them
    return df


BINARY_METHODS = [
    ("isotonic-linear", {"method": "isotonic"}),
    ("isotonic-step", {"method": "isotonic", "interpolation": "step", "increasing": "auto"}),
    ("isotonic-centered", {"method": "isotonic", "interpolation": "centered", "y_min": 0.02}),
    ("sigmoid", {"method": "sigmoid"}),
    ("histogram-uniform", {"method": "histogram", "n_bins": 7}),
    ("histogram-quantile", {"method": "histogram", "n_bins": 12, "strategy": "quantile"}),
    ("modl", {"method": "modl"}),
    ("beta", {"method": "beta"}),
    ("venn_abers", {"method": "venn_abers"}),
]


@pytest.mark.parametrize("kw", [kw for _, kw in BINARY_METHODS],
                         ids=[name for name, _ in BINARY_METHODS])
def test_a_binary_model_saves_in_format_2_and_loads_back_exactly(kw, tmp_path):
    weight = None if kw["method"] in ("modl", "venn_abers") else "w"
    model = distcal.fit(_rows(), score_col="s", label_col="y", weight_col=weight,
                        on_invalid="drop", **kw)
    assert model.dropped_rows == 3
    model.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert (meta["format"], meta["format_version"]) == ("distcal-keyed-model", 2)
    assert (meta["by"], meta["n_classes"], meta["method"]) == ([], 0, model.method)
    tables = {"maps"} | ({"blocks"} if kw["method"] in ("isotonic", "histogram", "modl")
                         else {"steps"} if kw["method"] == "venn_abers" else set())
    assert set(meta["tables"]) == tables
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == sorted(
        ["model.json", *(f"{t}.parquet" for t in tables)])
    probe = np.concatenate([np.linspace(-0.5, 1.5, 2001), _rows(seed=6).s.to_numpy(),
                            [-np.inf, np.inf, np.nan, 0.0, 1.0, 5e-324]])
    assert_same_binary(distcal.load(tmp_path / "m"), model, probe)


def test_a_binary_model_saved_on_an_fsspec_store_loads_back_exactly():
    model = distcal.fit(_rows(), score_col="s", label_col="y", weight_col="w",
                        on_invalid="drop", interpolation="centered")
    uri = f"memory://distcal-test-{uuid.uuid4().hex}/model"
    model.save(uri)
    assert_same_binary(distcal.load(uri), model, np.linspace(-0.5, 1.5, 501))
