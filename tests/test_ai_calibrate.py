"""The worked example of the Perl module AI::Calibrate (its code's output)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import distcal

POINTS = [(.9, 1), (.8, 1), (.7, 0), (.6, 1), (.55, 1), (.5, 1), (.45, 0), (.4, 1), (.35, 1),
          (.3, 0), (.27, 1), (.2, 0), (.18, 0), (.1, 1), (.02, 0)]
EXPECTED = [(.8, 1.0), (.5, .75), (.35, 2 / 3), (.27, .5), (.1, 1 / 3), (.02, 0.0)]


def score_prob(calibrated, score):
    """AI::Calibrate's score_prob, transcribed: first bound <= score, else 0."""
    for bound, prob in calibrated:
        if score >= bound:
            return prob
    return 0.0


@pytest.fixture
def model():
    df = pd.DataFrame(POINTS, columns=["score", "label"])
    return distcal.fit(df, interpolation="step")


def test_mapping(model):
    got = model.mapping()
    assert len(got) == len(EXPECTED)
    for (s, p), (es, ep) in zip(got, EXPECTED):
        assert s == es
        assert p == pytest.approx(ep, abs=1e-15)


def test_step_predictions_follow_score_prob(model):
    qs = np.linspace(0.02, 1.2, 1181)
    expect = [score_prob(EXPECTED, q) for q in qs]
    np.testing.assert_allclose(model.predict(qs), expect, atol=1e-15)
    # below the fitted range: the lowest block's value (AI::Calibrate says 0 too here)
    assert model.predict([0.0])[0] == 0.0


def test_describe(model):
    assert model.describe().splitlines() == [
        "1.000 > SCORE >= 0.800     prob = 1.000",
        "0.800 > SCORE >= 0.500     prob = 0.750",
        "0.500 > SCORE >= 0.350     prob = 0.667",
        "0.350 > SCORE >= 0.270     prob = 0.500",
        "0.270 > SCORE >= 0.100     prob = 0.333",
        "0.100 > SCORE >= 0.020     prob = 0.000",
    ]


def test_input_order_does_not_matter():
    rng = np.random.default_rng(0)
    shuffled = [POINTS[i] for i in rng.permutation(len(POINTS))]
    df = pd.DataFrame(shuffled, columns=["score", "label"])
    assert distcal.fit(df, interpolation="step").mapping() == \
        distcal.fit(pd.DataFrame(POINTS, columns=["score", "label"]),
                    interpolation="step").mapping()
