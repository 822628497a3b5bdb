"""distcal.sklearn.CalibratedClassifier against scikit-learn's CalibratedClassifierCV."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from distcal import MulticlassCalibrationModel
from distcal.sklearn import CalibratedClassifier

# A Pipeline's (or FrozenEstimator's) fit takes no sample_weight: the weights then weigh the
# calibration only, which the estimator says in a warning (test_sample_weight_goes_where_...).
pytestmark = pytest.mark.filterwarnings("ignore:.*takes no sample_weight:UserWarning")

TOL = {"isotonic": 1e-9, "sigmoid": 1e-4, "temperature": 1e-6}
LOADERS = {"iris": load_iris, "wine": load_wine, "digits": load_digits,
           "breast_cancer": load_breast_cancer}


def _lr():
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))


def _data(name, strings=False):
    X, y = LOADERS[name](return_X_y=True)
    if strings:
        y = np.array([f"class_{v}" for v in y])
    w = np.random.default_rng(0).uniform(0.3, 2.5, len(y))
    return X, y, w


def _sk(est, method, X, y, w, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FrozenEstimator takes no sample_weight
        return CalibratedClassifierCV(est, method=method, **kw).fit(X, y, sample_weight=w)


@pytest.mark.parametrize("name", list(LOADERS))
@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "temperature"])
@pytest.mark.parametrize("strings", [False, True])
def test_frozen_matches_sklearn(name, method, strings):
    X, y, w = _data(name, strings)
    idx = np.random.default_rng(1).permutation(len(y))
    a, b = idx[: len(y) // 2], idx[len(y) // 2:]
    clf = _lr().fit(X[a], y[a])
    ours = CalibratedClassifier(clf, method=method).fit(X[b], y[b], sample_weight=w[b])
    ref = _sk(FrozenEstimator(clf), method, X[b], y[b], w[b])
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), rtol=0,
                               atol=TOL[method])
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    agree = np.mean(ours.predict(X) == ref.predict(X))
    assert agree > 0.99  # argmax may flip only on exact-tolerance ties
    assert isinstance(ours.calibration_model_, MulticlassCalibrationModel)
    assert ours.estimators_[0] is clf  # never refitted
    assert ours.response_method_ == "decision_function"


@pytest.mark.parametrize("name", ["iris", "breast_cancer"])
@pytest.mark.parametrize("method", ["sigmoid", "temperature"])
def test_frozen_predict_proba_classifier(name, method):
    # GaussianNB has only predict_proba (isotonic: GaussianNB's probabilities
    # have near-ties < 1e-12, which scikit-learn's IsotonicRegression merges).
    X, y, w = _data(name, strings=True)
    clf = GaussianNB().fit(X[::2], y[::2])
    ours = CalibratedClassifier(clf, method=method).fit(X[1::2], y[1::2], sample_weight=w[1::2])
    ref = _sk(FrozenEstimator(clf), method, X[1::2], y[1::2], w[1::2])
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), rtol=0,
                               atol=TOL[method])
    assert ours.response_method_ == "predict_proba"


@pytest.mark.parametrize("name", ["iris", "wine", "breast_cancer"])
@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "temperature"])
@pytest.mark.parametrize("cv", [3, 5])
@pytest.mark.parametrize("ensemble", [True, False])
def test_cross_fitting_matches_sklearn(name, method, cv, ensemble):
    X, y, w = _data(name, strings=True)
    ours = CalibratedClassifier(_lr(), method=method, cv=cv, ensemble=ensemble)
    ours.fit(X, y, sample_weight=w)
    ref = _sk(_lr(), method, X, y, w, cv=cv, ensemble=ensemble)
    if method == "temperature" and _separable_folds(ours, ref):
        return  # checked fold by fold in _separable_folds
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), rtol=0,
                               atol=TOL[method])
    if ensemble:
        assert isinstance(ours.calibration_model_, list) and len(ours.calibration_model_) == cv
    else:
        assert isinstance(ours.calibration_model_, MulticlassCalibrationModel)


@pytest.mark.parametrize("frozen", [False, True])
def test_ensemble_auto_decides_as_sklearn(frozen):
    """ensemble="auto" (CalibratedClassifierCV's default since 1.6): no ensemble for a
    FrozenEstimator, one pair per fold otherwise; the same probabilities."""
    X, y, w = _data("wine", strings=True)
    est = FrozenEstimator(_lr().fit(X[::3], y[::3])) if frozen else _lr()
    ours = CalibratedClassifier(est, method="isotonic", cv=3, ensemble="auto")
    ours.fit(X, y, sample_weight=w)
    ref = _sk(est, "isotonic", X, y, w, cv=3, ensemble="auto")
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), rtol=0,
                               atol=TOL["isotonic"])
    assert isinstance(ours.calibration_model_, list) is (not frozen)
    assert len(ref.calibrated_classifiers_) == (1 if frozen else 3)


def _separable_folds(ours, ref):
    """Compare temperatures fold by fold; True if some calibration fold is separable.

    On a fold whose logits rank every row's class first the loss decreases
    towards 0 as beta grows: distcal returns the minimiser within
    scikit-learn's bounds, beta = e^10, while scikit-learn's bounded search
    stops wherever the loss is flat to rounding (beta = 94 or 516 on iris,
    cv=5), so probabilities differ there by up to 1e-3. Other folds: 1e-6.
    """
    models = ours.calibration_model_
    models = models if isinstance(models, list) else [models]
    separable = False
    for m, c in zip(models, ref.calibrated_classifiers_):
        sk_beta = float(c.calibrators[0].beta_)
        if m.params["beta"] == pytest.approx(np.exp(10.0), rel=1e-12):
            separable = True
            assert sk_beta > 50  # scikit-learn went far up the flat loss too
        else:
            assert m.params["beta"] == pytest.approx(sk_beta, rel=1e-6)
    return separable


@pytest.mark.slow
def test_digits_cross_fitting_and_splitter():
    X, y, w = _data("digits")
    X, y, w = X[:900], y[:900], w[:900]
    for splitter in (StratifiedKFold(3, shuffle=True, random_state=4), KFold(3)):
        for method in ("isotonic", "temperature"):
            ours = CalibratedClassifier(_lr(), method=method, cv=splitter).fit(X, y, w)
            ref = _sk(_lr(), method, X, y, w, cv=splitter, ensemble=True)
            if method == "temperature" and _separable_folds(ours, ref):
                continue
            np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), rtol=0,
                                       atol=TOL[method])


def test_params_are_passed():
    X, y, _ = _data("iris")
    clf = _lr().fit(X[::2], y[::2])
    ours = CalibratedClassifier(clf, params={"interpolation": "step"}).fit(X[1::2], y[1::2])
    assert ours.calibration_model_.class_model(0).params["interpolation"] == "step"
    hist = CalibratedClassifier(clf, method="histogram", params={"n_bins": 5})
    p = hist.fit(X[1::2], y[1::2]).predict_proba(X)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    model = hist.calibration_model_
    np.testing.assert_array_equal(p, model.predict(clf.decision_function(X)))


def test_clone_params_pipeline():
    X, y, _ = _data("wine", strings=True)
    est = CalibratedClassifier(LogisticRegression(max_iter=3000), method="sigmoid", cv=3,
                               params={"a": 1})
    c = clone(est)
    assert c.get_params()["method"] == "sigmoid" and c.params == {"a": 1}
    assert c.params is not est.params or c.params == est.params
    c.set_params(method="temperature", estimator__C=0.5, params=None)
    assert c.method == "temperature" and c.estimator.C == 0.5
    pipe = Pipeline([("scale", StandardScaler()), ("cal", c)]).fit(X, y)
    assert set(pipe.predict(X)) <= set(np.unique(y))
    assert pipe.predict_proba(X).shape == (len(y), 3)
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.mean() > 0.8
    # the frozen mode survives cloning with FrozenEstimator
    fitted = _lr().fit(X, y)
    frozen = clone(CalibratedClassifier(FrozenEstimator(fitted), method="isotonic"))
    frozen.fit(X, y)


def test_unfitted_estimator_without_cv():
    from sklearn.exceptions import NotFittedError

    X, y, _ = _data("iris")
    # cv=None is CalibratedClassifierCV's 5-fold cross-fitting, distcal's fitted classifier:
    # the error says so, and the way out
    with pytest.raises(NotFittedError, match="With cv=None .* pass cv=5"):
        CalibratedClassifier(_lr()).fit(X, y)


class _WeightSpy(LogisticRegression):
    """A LogisticRegression that records whether its fit got sample_weight."""

    def fit(self, X, y, sample_weight=None):
        self.got_weights_ = sample_weight is not None
        return super().fit(X, y, sample_weight=sample_weight)


@pytest.mark.parametrize("ensemble", [True, False])
def test_sample_weight_goes_where_metadata_routing_sends_it(ensemble):
    """With metadata routing, the classifier gets the weights when it requests them, also
    inside a Pipeline, and not when it declines them (as CalibratedClassifierCV, whose
    probabilities ours equal); without routing, a fit that takes no sample_weight warns."""
    import sklearn

    X, y, w = _data("wine")
    # Standardised: the bare classifier converges in tens of iterations, not thousands.
    X = StandardScaler().fit_transform(X)
    with sklearn.config_context(enable_metadata_routing=True):
        for request, est in [
                (False, _WeightSpy(max_iter=5000).set_fit_request(sample_weight=False)),
                (True, make_pipeline(StandardScaler().set_fit_request(sample_weight=False),
                                     _WeightSpy(max_iter=5000).set_fit_request(
                                         sample_weight=True)))]:
            ours = CalibratedClassifier(est, method="sigmoid", cv=3, ensemble=ensemble).fit(
                X, y, sample_weight=w)
            spy = [e[-1] if isinstance(e, Pipeline) else e for e in ours.estimators_]
            assert all(s.got_weights_ is request for s in spy)
            theirs = CalibratedClassifierCV(est, method="sigmoid", cv=3,
                                            ensemble=ensemble).fit(X, y, sample_weight=w)
            np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X),
                                       atol=TOL["sigmoid"])
    with pytest.warns(UserWarning, match="Pipeline.fit takes no sample_weight: the weights "
                      "weigh the calibration only"):
        CalibratedClassifier(_lr(), cv=3, ensemble=ensemble).fit(X, y, sample_weight=w)


def test_sample_weight_scalar_and_bad_values_as_scikit_learn_checks_them():
    X, y, _ = _data("iris")
    clf = FrozenEstimator(_lr().fit(X, y))
    scalar = CalibratedClassifier(clf).fit(X, y, sample_weight=2.0)
    np.testing.assert_array_equal(scalar.predict_proba(X), CalibratedClassifier(clf).fit(
        X, y, sample_weight=np.full(len(y), 2.0)).predict_proba(X))
    w = np.ones(len(y))
    w[[3, 9]] = np.nan, -1.0
    with pytest.raises(ValueError, match="sample_weight holds 1 NaN or infinite value; "
                       "distcal's weights count samples"):
        CalibratedClassifier(clf).fit(X, y, sample_weight=w)
    with pytest.raises(ValueError, match="sample_weight holds 1 negative value"):
        CalibratedClassifier(clf).fit(X, y, sample_weight=np.where(np.isnan(w), 1.0, w))


def test_a_training_fold_without_a_class_is_named():
    X, y, _ = _data("iris")
    others = np.flatnonzero(y != 2)
    test0 = np.concatenate([np.flatnonzero(y == 2), others[:30]])
    folds = [(np.setdiff1d(np.arange(len(y)), t), t) for t in (test0, others[30:70])]
    with pytest.raises(ValueError, match=r"the training samples of fold 0 of cv hold no "
                       r"samples of classes \[2\]"):
        CalibratedClassifier(_lr(), cv=folds).fit(X, y)


def test_set_params_after_fit_changes_nothing_until_the_next_fit():
    X, y, _ = _data("iris")
    cal = CalibratedClassifier(FrozenEstimator(_lr().fit(X, y)), method="temperature")
    before = cal.fit(X, y).predict_proba(X)
    cal.set_params(method="venn_abers")
    np.testing.assert_array_equal(cal.predict_proba(X), before)
    assert not hasattr(cal, "predict_interval")  # of the fitted method
    assert cal.fit(X, y).method_ == "venn_abers" and hasattr(cal, "predict_interval")


def test_too_few_per_class():
    X, y, _ = _data("iris")
    keep = np.r_[0:50, 50:100, 100:102]
    with pytest.raises(ValueError, match="3-fold"):
        CalibratedClassifier(_lr(), cv=3).fit(X[keep], y[keep])


def test_beta_needs_probabilities():
    # Beta calibration maps probabilities: a classifier with decision values only (their
    # negatives would all be clipped to one probability) is refused, naming the way out.
    from sklearn.svm import LinearSVC

    X, y, _ = _data("breast_cancer")
    svc = make_pipeline(StandardScaler(), LinearSVC()).fit(X, y)
    with pytest.raises(ValueError, match="method='beta' calibrates probabilities, and "
                                         "FrozenEstimator has no predict_proba"):
        CalibratedClassifier(FrozenEstimator(svc), method="beta").fit(X, y)
    fitted = CalibratedClassifier(FrozenEstimator(_lr().fit(X, y)), method="beta").fit(X, y)
    assert fitted.response_method_ == "predict_proba"


def test_attributes_follow_the_fit():
    # predict_interval exists for Venn-Abers only (hasattr tells, as for scikit-learn's
    # available_if methods); feature names are those of the classifier of the last fit.
    import pandas as pd

    X, y, _ = _data("iris")
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    named = CalibratedClassifier(FrozenEstimator(_lr().fit(frame, y))).fit(frame, y)
    assert list(named.feature_names_in_) == ["a", "b", "c", "d"]
    assert not hasattr(named, "predict_interval")
    with pytest.raises(AttributeError, match="has no attribute 'predict_interval'"):
        named.predict_interval(frame)
    named.set_params(estimator=FrozenEstimator(_lr().fit(X, y))).fit(X, y)
    assert not hasattr(named, "feature_names_in_") and named.n_features_in_ == 4
    va = CalibratedClassifier(FrozenEstimator(_lr().fit(X, y)), method="venn_abers").fit(X, y)
    p0, p1 = va.predict_interval(X[:5])
    assert p0.shape == p1.shape == (5, 3) and np.all(p0 <= p1)


# scikit-learn's own estimator checks. The frozen mode (cv=None) is not among
# them: the checks fit one instance on data of other shapes and feature counts,
# which a classifier fitted beforehand and never refitted cannot follow; the
# cross-fitting mode below is the same code path after the classifier's fit.
# MODL is not among the estimator's methods (it takes no sample weights).
# Histogram with 2 bins: the checks calibrate folds of a handful of rows, and
# distcal refuses more bins than rows (a ValueError naming n_bins).
_CHECKED = [CalibratedClassifier(LogisticRegression(C=1), method=m, cv=3,
                                 params={"n_bins": 2} if m == "histogram" else None)
            for m in ("isotonic", "sigmoid", "histogram", "temperature", "venn_abers", "beta")]


def _expected_failed(estimator):
    # Every check applies and passes (the array-API check is replaced by a check
    # of the tag that says it does not apply), except one for histogram.
    if estimator.method == "histogram":
        return {"check_classifiers_one_label_sample_weights":
                "after trimming, a calibration fold holds one row: fewer rows than histogram "
                "bins, which distcal refuses with a ValueError naming n_bins (the check wants "
                "the word 'class' in the message)"}
    if estimator.method == "venn_abers":
        reason = ("the check predicts at the calibration rows themselves, where Venn-Abers' "
                  "(p0, p1) jump (a test score tied with a calibration score pools with it); "
                  "predict_proba gives one row scores 2 ulps apart in a batch of repeated "
                  "rows and in X, which unties them in one estimator only (0.057 apart, "
                  "measured). distcal.fit with integer weights equals repeated rows "
                  "(test_venn_abers_weights_are_repeated_rows)")
        return {"check_sample_weight_equivalence_on_dense_data": reason,
                "check_sample_weight_equivalence_on_sparse_data": reason}
    return {}


@parametrize_with_checks(_CHECKED, expected_failed_checks=_expected_failed)
def test_sklearn_estimator_checks(estimator, check):
    name = getattr(check, "func", check).__name__
    if name == "check_array_api_input":
        # Applies only to estimators that declare array-API support; distcal is
        # numpy only, and says so (scikit-learn would skip the check otherwise).
        assert not estimator.__sklearn_tags__().array_api_support
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)
