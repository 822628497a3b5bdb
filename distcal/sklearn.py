"""A scikit-learn meta-estimator calibrating a classifier with distcal.

:class:`CalibratedClassifier` is a drop-in for scikit-learn's
``CalibratedClassifierCV``, with distcal's exact fits: the same responses
(``decision_function`` where the classifier has one, ``predict_proba``
otherwise; binary: the positive class's column), the same one-vs-rest
normalisation and temperature rule, the same folds, and so the same
probabilities (isotonic to rounding; sigmoid and temperature to the
tolerance of scikit-learn's optimisers, distcal's fits are converged to
rounding).

Two methods scikit-learn does not have: "beta" (beta calibration, which
maps probabilities: it calibrates ``predict_proba`` whenever the
classifier has it) and "venn_abers". With ``cv`` set and
``ensemble=True``, "venn_abers" is the cross Venn-Abers predictor (Vovk,
Petej & Fedorova 2015): per class, the folds' intervals (p0, p1) merge as
p = GM(p1) / (GM(1 - p0) + GM(p1)), geometric means over the folds, then
the one-vs-rest normalisation; :meth:`CalibratedClassifier.predict_interval`
gives the arithmetic means of p0 and p1 over the folds.
"""

from __future__ import annotations

import warnings
from inspect import signature
from typing import Any

import numpy as np
import pandas as pd
from sklearn import get_config
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import check_cv, cross_val_predict
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import _safe_indexing, get_tags, indexable
from sklearn.utils.metadata_routing import MetadataRouter, MethodMapping, process_routing
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from .core.multiclass import normalise_ovr
from .defaults import MULTICLASS_METHODS as METHODS
from .keyed_model import KeyedModel as MulticlassCalibrationModel
from .params import check_bool

__all__ = ["CalibratedClassifier"]


def _response_method(estimator: Any, method: str) -> str:
    # Beta calibration maps probabilities (scores in [0, 1]): predict_proba only
    # (decision values outside [0, 1] would be clipped to its ends).
    if method == "beta":
        if hasattr(estimator, "predict_proba"):
            return "predict_proba"
        raise ValueError(f"method='beta' calibrates probabilities, and "
                         f"{type(estimator).__name__} has no predict_proba; calibrate its "
                         "decision_function with method='sigmoid' (or another method)")
    for name in ("decision_function", "predict_proba"):
        if hasattr(estimator, name):
            return name
    raise TypeError(f"{type(estimator).__name__} has neither decision_function nor "
                    "predict_proba")


def _is_venn_abers(estimator: Any) -> bool:
    return bool(_method(estimator) == "venn_abers")


def _method(estimator: Any) -> str:
    """The method of the last fit (``method_``), before any fit the parameter: a
    ``set_params(method=...)`` after ``fit`` changes nothing until the next fit."""
    return str(getattr(estimator, "method_", estimator.method))


def _rows_of(params: dict[str, Any], n: int, rows: np.ndarray) -> dict[str, Any]:
    """The fit parameters for the samples ``rows``: array-likes of one value per sample
    indexed, anything else as it is (as scikit-learn's meta-estimators slice them)."""
    def per_sample(v: Any) -> bool:
        return hasattr(v, "__len__") and not isinstance(v, (str, dict)) and len(v) == n

    return {k: _safe_indexing(v, rows) if per_sample(v) else v for k, v in params.items()}


def _check_weights(sample_weight: Any, n: int) -> np.ndarray | None:
    """``sample_weight`` as n float64 weights (a scalar: the same for every sample), finite
    and >= 0 (distcal's weights count rows), else a ValueError naming it."""
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.ndim == 0:
        w = np.full(n, float(w))
    w = w.reshape(-1)
    if w.shape[0] != n:
        raise ValueError(f"sample_weight has {w.shape[0]} entries for {n} samples")
    for bad, what in ((~np.isfinite(w), "NaN or infinite"), (w < 0, "negative")):
        k = int(np.count_nonzero(bad))
        if k:
            raise ValueError(f"sample_weight holds {k} {what} "
                             f"{'value' if k == 1 else 'values'}; distcal's weights count "
                             "samples: finite and >= 0")
    return w


def _binary_column(pred: np.ndarray, method: str) -> np.ndarray:
    """scikit-learn's binary response: the decision value or P(classes_[1])."""
    pred = np.asarray(pred, dtype=np.float64)
    if method == "predict_proba":
        return pred[:, 1]
    return pred.reshape(-1)


def _check_same_classes(estimator_classes: Any, classes: np.ndarray) -> None:
    """Refuse calibration labels that are not the fitted classifier's classes (either way)."""
    if estimator_classes is None:
        return
    est = np.asarray(estimator_classes)
    if est.shape == classes.shape and np.array_equal(est, classes):
        return
    unknown = [c for c in classes.tolist() if c not in set(est.tolist())]
    if unknown:
        raise ValueError(f"y holds labels {_few(unknown)} that are not among the classifier's "
                         f"classes {_few(est.tolist())}; calibrate on labels of the classes "
                         "the classifier predicts")
    missing = [c for c in est.tolist() if c not in set(classes.tolist())]
    raise ValueError(f"the classifier has {len(est)} classes {_few(est.tolist())} but y holds "
                     f"{len(classes)} of them (none of {_few(missing)}); calibration needs "
                     "samples of every class of the classifier")


def _few(values: list[Any], n: int = 10) -> str:
    shown = ", ".join(repr(v) for v in values[:n])
    return f"[{shown}{', ...' if len(values) > n else ''}]"


class CalibratedClassifier(ClassifierMixin, MetaEstimatorMixin, BaseEstimator):
    """Probability calibration of a classifier by distcal (isotonic, sigmoid, histogram,
    beta, Venn-Abers, temperature).

    Parameters
    ----------
    estimator : classifier
        With ``cv=None``: an already fitted classifier, never refitted
        (scikit-learn's ``CalibratedClassifierCV(FrozenEstimator(clf))``).
        Note that :func:`sklearn.base.clone` unfits it; wrap it in
        ``sklearn.frozen.FrozenEstimator`` where it will be cloned (e.g.
        inside ``cross_val_score``). With ``cv`` set: an unfitted
        classifier, cloned and fitted per fold.
    method : {"isotonic", "sigmoid", "histogram", "beta", "venn_abers", "temperature"}
        One-vs-rest with a binary distcal method, or temperature scaling.
        The default is distcal's default, "isotonic" (``CalibratedClassifierCV``'s
        is "sigmoid": pass ``method="sigmoid"`` for its results).
        "beta" calibrates ``predict_proba`` (it maps probabilities);
        "venn_abers" with ``cv`` is the cross Venn-Abers predictor (module
        docstring).
    params : dict, optional
        Method parameters for :func:`distcal.fit`, e.g. ``{"interpolation": "step"}``.
    cv : None, int, or a cross-validation splitter
        None: calibrate the fitted ``estimator`` on the data given to
        ``fit``. Otherwise cross-fitting as ``CalibratedClassifierCV(cv=...)``,
        with the splitter of ``sklearn.model_selection.check_cv(cv, y,
        classifier=True)`` (an int: ``StratifiedKFold(cv)``, no shuffle).
    ensemble : bool or "auto"
        With ``cv`` set: True fits one (classifier, calibration) pair per
        fold and averages their probabilities; False fits the classifier on
        all data and calibrates on the out-of-fold responses of
        ``cross_val_predict``; "auto" (``CalibratedClassifierCV``'s default
        since scikit-learn 1.6) is False for a ``FrozenEstimator``, True
        otherwise.

    Attributes
    ----------
    classes_ : ndarray
        The class labels (any labels, sorted as ``LabelEncoder`` sorts
        them); class index k of the distcal model is ``classes_[k]``.
    calibration_model_ : KeyedModel or list of them
        The distcal model (a :class:`~distcal.KeyedModel`, of which
        ``MulticlassCalibrationModel`` is another name), fitted on the
        classifier's responses as the score columns ``score_0``,
        ``score_1``, ...; a list of one model per fold when ``cv`` is set
        and ``ensemble=True``.
    estimators_ : list
        The classifier(s) whose responses are calibrated (one per model).
    response_method_ : str
        "decision_function" or "predict_proba".

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = LogisticRegression(max_iter=1000).fit(X[::2], y[::2])
    >>> cal = CalibratedClassifier(clf, method="temperature").fit(X[1::2], y[1::2])
    >>> cal.predict_proba(X[:2]).shape
    (2, 3)
    >>> bool(cal.calibration_model_.params["beta"] > 0)
    True
    """

    def __init__(self, estimator: Any = None, method: str = "isotonic",
                 params: dict[str, Any] | None = None, cv: Any = None,
                 ensemble: bool | str = True):
        self.estimator = estimator
        self.method = method
        self.params = params
        self.cv = cv
        self.ensemble = ensemble

    # -- helpers ----------------------------------------------------------
    def _scores(self, estimator: Any, X: Any) -> np.ndarray:
        """The calibrated-on response as an (n, K) or, binary, (n, 1) matrix."""
        pred = np.asarray(getattr(estimator, self.response_method_)(X), dtype=np.float64)
        return self._shape_scores(estimator, pred)

    def _shape_scores(self, estimator: Any, pred: np.ndarray) -> np.ndarray:
        k = len(self.classes_)
        _check_same_classes(getattr(estimator, "classes_", None), self.classes_)
        if k == 2:
            s = _binary_column(pred, self.response_method_)
            if _method(self) == "temperature" and self.response_method_ == "predict_proba":
                return np.column_stack([1.0 - s, s])  # scikit-learn's pair
            return s.reshape(-1, 1)
        if pred.ndim != 2 or pred.shape[1] != k:
            raise ValueError(f"the classifier's {self.response_method_} gives "
                             f"{pred.shape[1] if pred.ndim == 2 else 1} columns for "
                             f"{k} classes: every (training fold of the) data must hold "
                             "every class")
        return pred

    def _calibrate(self, scores: np.ndarray, y_idx: np.ndarray,
                   sample_weight: np.ndarray | None) -> MulticlassCalibrationModel:
        cols = [f"score_{j}" for j in range(scores.shape[1])]
        frame = pd.DataFrame(scores, columns=cols, copy=False)
        frame["label"] = y_idx
        wcol = None
        if sample_weight is not None:
            frame["weight"] = sample_weight
            wcol = "weight"
        from .api import fit

        model: MulticlassCalibrationModel = fit(
            frame, method=self.method_, score_cols=cols, label_col="label", weight_col=wcol,
            **dict(self.params or {}))
        return model

    def _routed(self, sample_weight: np.ndarray | None, fit_params: dict[str, Any]
                ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The classifier's fit parameters and the splitter's split parameters.

        With scikit-learn's metadata routing enabled, as the classifier and
        the splitter request them (:meth:`get_metadata_routing`); else, as
        ``CalibratedClassifierCV`` does, ``fit_params`` and ``sample_weight``
        to the classifier if its ``fit`` takes it (a warning if not: the
        weights then weigh the calibration only).
        """
        if get_config()["enable_metadata_routing"]:
            routed = process_routing(self, "fit", sample_weight=sample_weight, **fit_params)
            return dict(routed.estimator.fit), dict(routed.splitter.split)
        kwargs = dict(fit_params)
        if sample_weight is not None and self.cv is not None:
            if "sample_weight" in signature(self.estimator.fit).parameters:
                kwargs["sample_weight"] = sample_weight
            else:
                warnings.warn(f"{type(self.estimator).__name__}.fit takes no sample_weight: "
                              "the weights weigh the calibration only, not the classifier's "
                              "fit (with metadata routing enabled, they go where the "
                              "classifier requests them)", UserWarning, stacklevel=3)
        return kwargs, {}

    def get_metadata_routing(self) -> MetadataRouter:
        """Where ``fit``'s metadata goes: ``sample_weight`` to the calibration itself, and
        any metadata the classifier's ``fit`` and the splitter's ``split`` request to them
        (scikit-learn's metadata routing, as ``CalibratedClassifierCV``)."""
        return (MetadataRouter(owner=self).add_self_request(self)
                .add(estimator=self.estimator,
                     method_mapping=MethodMapping().add(caller="fit", callee="fit"))
                .add(splitter=self.cv,
                     method_mapping=MethodMapping().add(caller="fit", callee="split")))

    # -- scikit-learn API -------------------------------------------------
    def fit(self, X: Any, y: Any, sample_weight: Any = None,
            **fit_params: Any) -> CalibratedClassifier:
        """Calibrate the classifier (and with ``cv`` set, fit it) on X, y.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels of any type (strings too).
        sample_weight : array-like of shape (n_samples,), optional
            Weights for the calibration, finite and >= 0 (a scalar: the same
            for every sample); Venn-Abers reads them as counts of rows, so
            their scale matters there. With ``cv`` set they also go to the
            classifier's fit: where its ``fit`` takes ``sample_weight``, or
            with metadata routing enabled, where it requests them.
        **fit_params : dict
            With ``cv`` set: parameters for the classifier's ``fit`` (with
            metadata routing enabled, any metadata the classifier or the
            splitter requests).

        Returns
        -------
        self
        """
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.estimator is None:
            raise ValueError("estimator is required")
        if self.ensemble != "auto":
            check_bool(self.ensemble, "ensemble")
        check_classification_targets(y)
        X, y = indexable(X, y)
        y = column_or_1d(y, warn=True)
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        if len(self.classes_) < 2:
            raise ValueError("calibration needs samples of at least 2 classes; got 1 class")
        y_idx = encoder.transform(y)
        sample_weight = _check_weights(sample_weight, y.shape[0])
        fit_kwargs, split_kwargs = self._routed(sample_weight, fit_params)
        self.method_ = self.method
        self.response_method_ = _response_method(self.estimator, self.method)

        if self.cv is None:
            try:
                check_is_fitted(self.estimator)
            except NotFittedError as exc:
                raise NotFittedError(
                    f"{exc} With cv=None (the default) the classifier must be fitted "
                    "already, and is never refitted (CalibratedClassifierCV's cv=None means "
                    "5-fold cross-fitting instead): pass cv=5 to fit it per fold, or a "
                    "fitted classifier (in sklearn.frozen.FrozenEstimator where it will be "
                    "cloned).") from exc
            # The fitted classifier's classes are the calibration's: every label of y
            # among them, and each of them in y (as CalibratedClassifierCV requires).
            _check_same_classes(getattr(self.estimator, "classes_", None), self.classes_)
            self.estimators_ = [self.estimator]
            model = self._calibrate(self._scores(self.estimator, X), y_idx, sample_weight)
            self.calibration_model_: (MulticlassCalibrationModel
                                      | list[MulticlassCalibrationModel]) = model
            self._models = [model]
        else:
            self._cross_fit(X, y, y_idx, sample_weight, fit_kwargs, split_kwargs)
        first = self.estimators_[0]
        for attr in ("n_features_in_", "feature_names_in_"):  # the classifier's (or none)
            if hasattr(first, attr):
                setattr(self, attr, getattr(first, attr))
            elif attr in vars(self):  # from an earlier fit, of another classifier
                delattr(self, attr)
        return self

    def _cross_fit(self, X: Any, y: np.ndarray, y_idx: np.ndarray,
                   sample_weight: np.ndarray | None, fit_kwargs: dict[str, Any],
                   split_kwargs: dict[str, Any]) -> None:
        n_folds = (self.cv if isinstance(self.cv, int) and not isinstance(self.cv, bool)
                   else getattr(self.cv, "n_splits", None))
        if n_folds and np.min(np.bincount(y_idx)) < n_folds:
            raise ValueError(f"Requesting {n_folds}-fold cross-validation but provided less "
                             f"than {n_folds} examples for at least one class.")
        cv = check_cv(self.cv, y, classifier=True)
        ensemble = self.ensemble
        if ensemble == "auto":  # as CalibratedClassifierCV decides it
            from sklearn.frozen import FrozenEstimator

            ensemble = not isinstance(self.estimator, FrozenEstimator)
        if ensemble:
            self.estimators_, models = [], []
            for fold, (train, test) in enumerate(cv.split(X, y, **split_kwargs)):
                est = clone(self.estimator)
                est.fit(_safe_indexing(X, train), y[train],
                        **_rows_of(fit_kwargs, y.shape[0], train))
                self._check_fold(est, fold)
                scores = self._scores(est, _safe_indexing(X, test))
                models.append(self._calibrate(scores, y_idx[test],
                                              None if sample_weight is None
                                              else sample_weight[test]))
                self.estimators_.append(est)
            self.calibration_model_ = models
            self._models = models
        else:
            est = clone(self.estimator)
            pred = cross_val_predict(clone(self.estimator), X, y, cv=cv,
                                     method=self.response_method_,
                                     params={**fit_kwargs, **split_kwargs} or None)
            est.fit(X, y, **fit_kwargs)
            scores = self._shape_scores(est, np.asarray(pred, dtype=np.float64))
            model = self._calibrate(scores, y_idx, sample_weight)
            self.estimators_ = [est]
            self.calibration_model_ = model
            self._models = [model]

    def _check_fold(self, estimator: Any, fold: int) -> None:
        """A fold's classifier knows every class (it scores the classes it was fitted on)."""
        known = getattr(estimator, "classes_", None)
        if known is None:
            return
        missing = [c for c in self.classes_.tolist() if c not in set(np.asarray(known).tolist())]
        if missing:
            raise ValueError(f"the training samples of fold {fold} of cv hold no samples of "
                             f"classes {_few(missing)}, so its classifier scores none of them; "
                             "use a splitter whose training folds hold every class (an int "
                             "cv is StratifiedKFold)")

    def _intervals(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Every model's Venn-Abers (p0, p1) per class: two (folds, n, classes) arrays.

        K = 2: only class 1 is calibrated; class 0's interval is (1 - p1, 1 - p0).
        """
        p0s, p1s = [], []
        for est, model in zip(self.estimators_, self._models):
            s = self._scores(est, X)
            k = len(self.classes_)
            p0, p1 = np.empty((s.shape[0], k)), np.empty((s.shape[0], k))
            for c in ([1] if k == 2 else range(k)):
                p0[:, c], p1[:, c] = model.class_model(c).predict_interval(s[:, -1 if k == 2
                                                                              else c])
            if k == 2:
                p0[:, 0], p1[:, 0] = 1.0 - p1[:, 1], 1.0 - p0[:, 1]
            p0s.append(p0)
            p1s.append(p1)
        return np.stack(p0s), np.stack(p1s)

    @available_if(_is_venn_abers)
    def predict_interval(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """The Venn-Abers intervals (p0, p1), each (n_samples, n_classes) (venn_abers only:
        for the other methods the attribute does not exist, as scikit-learn's
        ``available_if`` methods).

        Per class, the arithmetic means over the fold models of p0 and of p1
        (one model without cross-fitting), before any normalisation.
        """
        check_is_fitted(self, "classes_")
        p0, p1 = self._intervals(X)
        return p0.mean(axis=0), p1.mean(axis=0)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Calibrated probabilities, shape (n_samples, n_classes), columns as ``classes_``.

        With several (fold) models, the mean of their probabilities; for
        "venn_abers", the cross Venn-Abers merge (module docstring).
        """
        check_is_fitted(self, "classes_")
        if _method(self) == "venn_abers" and len(self._models) > 1:
            return self._cross_venn_abers(X)
        total: np.ndarray | None = None
        for est, model in zip(self.estimators_, self._models):
            p = model.predict(self._scores(est, X))
            total = p if total is None else total + p
        if total is None:
            raise ValueError("the calibrated classifier holds no calibration models")
        mean: np.ndarray = total / len(self._models)
        return mean

    def _cross_venn_abers(self, X: Any) -> np.ndarray:
        """p = GM(p1) / (GM(1 - p0) + GM(p1)) per class over the folds, then normalised
        as any one-vs-rest output (:func:`~distcal.core.multiclass.normalise_ovr`).

        Where both geometric means are 0 (one fold is sure of 0, another of
        1) the class gets 1/2; a NaN score gives NaN, as every method does.
        """
        p0, p1 = self._intervals(X)
        with np.errstate(divide="ignore"):
            g1 = np.exp(np.mean(np.log(p1), axis=0))
            g0 = np.exp(np.mean(np.log(1.0 - p0), axis=0))
        den = g0 + g1
        with np.errstate(invalid="ignore"):
            p = np.where(den == 0.0, 0.5, g1 / np.where(den == 0.0, 1.0, den))
        return normalise_ovr(p)

    def predict(self, X: Any) -> np.ndarray:
        """The class of highest calibrated probability."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        if self.estimator is not None:
            tags.input_tags.sparse = get_tags(self.estimator).input_tags.sparse
        return tags
