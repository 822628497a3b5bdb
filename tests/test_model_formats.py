"""Model directories written by distcal 0.1 load and predict exactly as 0.1 predicted.

The fixtures in tests/fixtures/models_0_1 were written by distcal 0.1's own
code (binary, multiclass and segmented models of every method), with its
predictions on probe scores saved beside them (expected.json).
"""

import json
from pathlib import Path

import numpy as np
import pytest

import distcal
from distcal import KeyedModel

FIXTURES = Path(__file__).parent / "fixtures" / "models_0_1"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
PROBE = EXPECTED["probe"]


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
    if not name.startswith("binary"):
        assert isinstance(back, KeyedModel)
        meta = json.loads((tmp_path / "again" / "model.json").read_text())
        assert meta["format"] == "distcal-keyed-model" and meta["format_version"] == 2
