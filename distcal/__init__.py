"""distcal: exact probability calibration and decision thresholds at scale.

    >>> import distcal
    >>> model = distcal.fit("scores.parquet", method="isotonic")   # doctest: +SKIP
    >>> model.predict([0.1, 0.5, 0.9])                              # doctest: +SKIP
"""

from . import metrics
from .api import fit, fit_and_threshold
from .discretize import discretize
from .errors import DataError, ModelError, ParameterError
from .evaluation import EvaluationReport, evaluate, evaluate_many
from .keyed_model import KeyedModel, MulticlassCalibrationModel, SegmentedCalibrationModel
from .loading import load
from .model import CalibrationModel
from .monitor import MonitorReport, monitor
from .summary import Summary, load_summary, merge_summaries, summarize
from .threshold import ThresholdResult, ThresholdTracker, optimal_threshold
from .version import __version__

__all__ = ["fit", "fit_and_threshold", "discretize", "load", "evaluate", "evaluate_many",
           "optimal_threshold",
           "summarize", "Summary", "load_summary", "merge_summaries", "monitor", "MonitorReport",
           "metrics", "CalibrationModel", "KeyedModel", "MulticlassCalibrationModel",
           "SegmentedCalibrationModel", "EvaluationReport",
           "ThresholdResult", "ThresholdTracker", "DataError", "ModelError",
           "ParameterError", "__version__"]
