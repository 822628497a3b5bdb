"""``pyspark.ml`` integration: a calibrator that fits and persists in a Pipeline.

    from pyspark.ml import Pipeline
    from distcal.spark import Calibrator

    pipe = Pipeline(stages=[..., Calibrator(scoreCol="probability", scoreIndex=1,
                                            labelCol="label", outputCol="calibrated")])
    fitted = pipe.fit(train)            # the calibrator stage is a CalibratorModel
    fitted.write().overwrite().save("hdfs:///pipelines/p1")
    PipelineModel.load("hdfs:///pipelines/p1").transform(test)

The fitted stage keeps the engine-independent :class:`distcal.CalibrationModel`
as ``.model``; it is saved inside the stage's directory in distcal's own
format (JSON + Parquet, no pickle) next to Spark's parameter metadata.
"""

from __future__ import annotations

from typing import Any

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.util import (
    DefaultParamsReader,
    DefaultParamsWriter,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)

from ..api import fit
from ..defaults import DEFAULTS, METHOD_PARAMS, METHODS
from ..errors import DataError, ModelError, ParameterError
from ..loading import load_dir
from ..model import CalibrationModel
from ..storage import STAGE, OutputExistsError, fetch_dir, filesystem_for, publish_dir, publishing
from ..storage.hadoop import qualified

__all__ = ["Calibrator", "CalibratorModel"]


def _p(name: str, doc: str, conv: Any = TypeConverters.toString) -> Param:
    return Param(Params._dummy(), name, doc, typeConverter=conv)


def _to_increasing(value: Any) -> str:
    """``increasing`` as its text: a Python bool as "true" / "false" too."""
    return str(value).lower() if isinstance(value, bool) else TypeConverters.toString(value)


class _CalibratorParams(Params):
    scoreCol = _p("scoreCol", "column of classifier scores")
    scoreIndex = _p("scoreIndex", "element of the vectors in scoreCol that is the score (unset: "
                    "scoreCol holds numbers), e.g. 1 for a classifier's probability",
                    TypeConverters.toInt)
    labelCol = _p("labelCol", "column of 0/1 labels (or rates in [0, 1])")
    weightCol = _p("weightCol", "column of row weights (unset: all 1)")
    outputCol = _p("outputCol", "column for the calibrated probability")
    method = _p("method", "isotonic | sigmoid | histogram | modl | beta | venn_abers")
    increasing = _p("increasing", "isotonic: true | false | auto", _to_increasing)
    interpolation = _p("interpolation", "isotonic: linear | step | centered")
    yMin = _p("yMin", "isotonic: lower bound of the fitted values", TypeConverters.toFloat)
    yMax = _p("yMax", "isotonic: upper bound of the fitted values", TypeConverters.toFloat)
    nBins = _p("nBins", "histogram: number of bins", TypeConverters.toInt)
    strategy = _p("strategy", "histogram: uniform | quantile")

    def __init__(self) -> None:
        super().__init__()
        iso = METHOD_PARAMS["isotonic"]
        self._setDefault(scoreCol=DEFAULTS.score_col, labelCol=DEFAULTS.label_col,
                         outputCol=DEFAULTS.output_col, method=DEFAULTS.method,
                         increasing=str(iso["increasing"]).lower(),
                         interpolation=iso["interpolation"], nBins=DEFAULTS.n_bins,
                         strategy=DEFAULTS.strategy)

    def _opt(self, param: Param) -> Any:
        return self.getOrDefault(param) if self.isDefined(param) else None

    # Getters, as every pyspark.ml stage has them (None: unset, no default).
    def getScoreCol(self) -> str:
        return self.getOrDefault(self.scoreCol)

    def getScoreIndex(self) -> int | None:
        return self._opt(self.scoreIndex)

    def getLabelCol(self) -> str:
        return self.getOrDefault(self.labelCol)

    def getWeightCol(self) -> str | None:
        return self._opt(self.weightCol)

    def getOutputCol(self) -> str:
        return self.getOrDefault(self.outputCol)

    def getMethod(self) -> str:
        return self.getOrDefault(self.method)

    def getIncreasing(self) -> str:
        return self.getOrDefault(self.increasing)

    def getInterpolation(self) -> str:
        return self.getOrDefault(self.interpolation)

    def getYMin(self) -> float | None:
        return self._opt(self.yMin)

    def getYMax(self) -> float | None:
        return self._opt(self.yMax)

    def getNBins(self) -> int:
        return self.getOrDefault(self.nBins)

    def getStrategy(self) -> str:
        return self.getOrDefault(self.strategy)

    # Setters of what a fitted stage reads when it transforms (the Calibrator has
    # every setter; a CalibratorModel only these, as pyspark.ml's models).
    def setScoreCol(self, value: str) -> Any:
        return self._set(scoreCol=value)

    def setScoreIndex(self, value: int) -> Any:
        return self._set(scoreIndex=value)

    def setOutputCol(self, value: str) -> Any:
        return self._set(outputCol=value)

    def _fit_kwargs(self) -> dict[str, Any]:
        method = self.getMethod()
        kw: dict[str, Any] = {"method": method, "score_col": self.getScoreCol(),
                              "label_col": self.getLabelCol(),
                              "weight_col": self.getWeightCol(),
                              "score_index": self.getScoreIndex()}
        if method == "isotonic":
            inc = self.getIncreasing().lower()
            kw.update(increasing={"true": True, "false": False}.get(inc, inc),
                      interpolation=self.getInterpolation(),
                      y_min=self.getYMin(), y_max=self.getYMax())
        elif method == "histogram":
            kw.update(n_bins=self.getNBins(), strategy=self.getStrategy())
        return kw


class Calibrator(Estimator, _CalibratorParams, MLReadable, MLWritable):
    """Fits a distcal calibration map on a Spark DataFrame (exact, distributed).

    ``fit(df)`` runs :func:`distcal.fit` with ``engine="spark"`` on one
    binary score per row and returns a :class:`CalibratorModel`.

    Params (keyword arguments of the constructor and of ``setParams``; each
    also has its setter and getter, ``setScoreCol`` / ``getScoreCol`` ...,
    and the fitted model the setters of ``scoreCol``, ``scoreIndex`` and
    ``outputCol``):

    scoreCol
        Column of classifier scores (default: "score"). A vector column
        (``ArrayType`` or ``VectorUDT``) needs ``scoreIndex``.
    scoreIndex
        Element of the vectors in ``scoreCol`` that is the score, e.g. 1 for
        a binary classifier's ``probability`` (default: unset, ``scoreCol``
        holds numbers).
    labelCol
        Column of 0/1 labels or rates in [0, 1] (default: "label").
    weightCol
        Column of row weights, finite and >= 0 (default: unset, every
        weight 1).
    outputCol
        Column the fitted model adds (default: "calibrated").
    method
        "isotonic", "sigmoid", "histogram", "modl", "beta" or "venn_abers"
        (default: "isotonic"). Only isotonic and histogram read Params of
        their own (below); the other methods use their default parameters.
    increasing
        isotonic: direction of the map, "true", "false" or "auto" (default:
        "true"); a Python ``True`` / ``False`` is taken as its text.
    interpolation
        isotonic: between blocks, "linear", "step" or "centered" (default:
        "linear").
    yMin, yMax
        isotonic: lower and upper bound of the fitted values (default:
        unset, no bound).
    nBins
        histogram: number of bins (default: 10).
    strategy
        histogram: bin edges, "uniform" or "quantile" (default: "uniform").

    The fitted :class:`CalibratorModel` has the same Params and keeps the
    :class:`distcal.CalibrationModel` as ``.model``. Its ``transform``
    returns the DataFrame with every column kept and one more, ``outputCol``
    (double): the calibrated probability of the row's score
    (``model.predict``; a null score gives null), computed lazily inside
    the JVM. An ``outputCol`` that already exists is a
    :class:`~distcal.DataError`.
    """

    @keyword_only
    def __init__(self, *, scoreCol: str = DEFAULTS.score_col, scoreIndex: int | None = None,
                 labelCol: str = DEFAULTS.label_col, weightCol: str | None = None,
                 outputCol: str = DEFAULTS.output_col, method: str = DEFAULTS.method,
                 increasing: str = "true", interpolation: str = "linear",
                 yMin: float | None = None, yMax: float | None = None,
                 nBins: int = DEFAULTS.n_bins, strategy: str = DEFAULTS.strategy):
        super().__init__()
        self.setParams(**self._input_kwargs)  # type: ignore[attr-defined]  # set by keyword_only

    @keyword_only
    def setParams(self, **kwargs: Any) -> Calibrator:
        """Set the Params given; one given as None is cleared (its default, or unset)."""
        for name, value in kwargs.items():
            if value is None:
                self.clear(getattr(self, name))
        return self._set(**{k: v for k, v in kwargs.items() if v is not None})

    def setLabelCol(self, value: str) -> Calibrator:
        return self._set(labelCol=value)

    def setWeightCol(self, value: str) -> Calibrator:
        return self._set(weightCol=value)

    def setMethod(self, value: str) -> Calibrator:
        return self._set(method=value)

    def setIncreasing(self, value: Any) -> Calibrator:
        return self._set(increasing=value)

    def setInterpolation(self, value: str) -> Calibrator:
        return self._set(interpolation=value)

    def setYMin(self, value: float) -> Calibrator:
        return self._set(yMin=value)

    def setYMax(self, value: float) -> Calibrator:
        return self._set(yMax=value)

    def setNBins(self, value: int) -> Calibrator:
        return self._set(nBins=value)

    def setStrategy(self, value: str) -> Calibrator:
        return self._set(strategy=value)

    def write(self) -> MLWriter:
        return _StageWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _StageReader(cls)

    def _fit(self, dataset: Any) -> CalibratorModel:
        from ..engines import get_engine

        if self.getMethod() not in METHODS:  # (distcal.fit also takes "temperature")
            raise ParameterError(f"method must be one of {', '.join(METHODS)} (the stage "
                                 f"calibrates one binary score), got {self.getMethod()!r}")
        col = self.getScoreCol()
        if self.getScoreIndex() is None and get_engine("spark").is_vector_column(dataset, col):
            # The stage calibrates one binary score; distcal.fit takes vectors as multiclass.
            raise DataError(f"column '{col}' (score) holds vectors: set scoreIndex to the "
                            "element to calibrate (e.g. 1, a binary classifier's probability "
                            "of class 1); the Calibrator stage calibrates one binary score")
        model = CalibratorModel(fit(dataset, engine="spark", **self._fit_kwargs()))
        self._copyValues(model)
        return model


class CalibratorModel(Model, _CalibratorParams, MLReadable, MLWritable):
    """The fitted calibrator: adds ``outputCol`` = calibrated probability of ``scoreCol``."""

    def __init__(self, model: CalibrationModel | None = None):
        super().__init__()
        self.model = model

    def _transform(self, dataset: Any) -> Any:
        if self.model is None:
            raise ModelError("this CalibratorModel holds no fitted model: get one from "
                             "Calibrator.fit or CalibratorModel.load")
        return self.model.transform(dataset, score_col=self.getScoreCol(),
                                    output_col=self.getOutputCol(),
                                    score_index=self.getScoreIndex())

    def write(self) -> MLWriter:
        return _StageWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _ModelReader(cls)


def _metadata_session(io: MLWriter | MLReader) -> Any:
    """What Spark's metadata helpers take: the SparkContext (pyspark 3.5 takes only that),
    or on Spark Connect, which has no SparkContext on the client, the session (pyspark 4)."""
    try:
        return io.sc
    except AttributeError:  # Spark Connect
        return io.sparkSession


class _StageWriter(MLWriter):
    """Writes a stage: Spark's parameter metadata, and a fitted stage's model beside it.

    Not pyspark's ``DefaultParamsWriter`` for the unfitted stage either: its
    ``overwrite()`` deletes the old directory through the JVM session, which a
    Spark Connect client does not have.
    """

    def __init__(self, instance: Calibrator | CalibratorModel):
        super().__init__()
        self.instance = instance

    def save(self, path: str) -> None:
        """The stage's directory (Spark's ``metadata/``, distcal's ``model/``) written aside
        and published in one step (:func:`~distcal.storage.publish.publishing`): never
        half-written. With ``overwrite()`` an earlier calibrator directory is replaced once
        the new one is complete (Spark's own writers delete it first), and nothing else
        is."""
        if not isinstance(path, str):
            raise TypeError(f"path should be a string, got type {type(path)}")
        path = qualified(path, self.sparkSession)  # where Spark writes the metadata
        try:
            with publishing(filesystem_for(path, self.sparkSession), path,
                            overwrite=self.shouldOverwrite, kind=STAGE) as tmp:
                self.saveImpl(tmp)
        except OutputExistsError as e:  # in the words of Spark's own writers
            raise OutputExistsError(e.target, "use write().overwrite().save(path) to "
                                    "replace it") from None

    def saveImpl(self, path: str) -> None:
        DefaultParamsWriter.saveMetadata(self.instance, path, _metadata_session(self))
        if not isinstance(self.instance, CalibratorModel):
            return
        assert self.instance.model is not None, "a CalibratorModel holds a fitted model"
        target = path.rstrip("/") + "/model"
        publish_dir(filesystem_for(target, self.sparkSession), target,
                    self.instance.model.write_dir)


class _StageReader(MLReader):
    """Reads a stage of class ``cls`` (the unfitted one: its Params only); a directory of
    another stage is a ``ModelError`` naming both (as Spark's own readers refuse it)."""

    def __init__(self, cls: type):
        super().__init__()
        self.cls = cls

    def metadata(self, path: str) -> dict[str, Any]:
        metadata = DefaultParamsReader.loadMetadata(path, _metadata_session(self))
        expected = f"{self.cls.__module__}.{self.cls.__name__}"
        found = str(metadata.get("class"))
        if found != expected:
            other = {"Calibrator": "CalibratorModel"}.get(self.cls.__name__, "Calibrator")
            hint = f" (load it with {other}.load)" if found == f"{__name__}.{other}" else ""
            raise ModelError(f"'{path}' holds a {found} stage, not a {expected}{hint}")
        return metadata

    def load(self, path: str) -> Any:
        path = qualified(path, self.sparkSession)
        metadata = self.metadata(path)
        stage = self.cls()
        DefaultParamsReader.getAndSetParams(stage, metadata)
        stage._resetUid(metadata["uid"])
        return stage


class _ModelReader(_StageReader):
    def load(self, path: str) -> CalibratorModel:
        path = qualified(path, self.sparkSession)
        metadata = self.metadata(path)
        source = path.rstrip("/") + "/model"
        core = fetch_dir(filesystem_for(source, self.sparkSession), source, load_dir)
        if not isinstance(core, CalibrationModel):
            raise ModelError(f"'{source}' holds {core!r}; a CalibratorModel holds the model "
                             "of a binary score")
        model = self.cls(core)
        DefaultParamsReader.getAndSetParams(model, metadata)
        model._resetUid(metadata["uid"])
        return model
