"""Every default value of distcal, in one place.

The Python API, the command line, the jobs and the ``pyspark.ml`` stage
all read their defaults from here, so they cannot drift apart.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

__all__ = ["DEFAULTS", "METHOD_PARAMS", "METHODS", "MULTICLASS_METHODS", "STRATEGIES",
           "INTERPOLATIONS"]


class _Defaults:
    """Column names and parameters used when the caller gives none."""

    score_col = "score"
    label_col = "label"
    weight_col: str | None = None
    prob_col = "prob"          # evaluation's probability column
    output_col = "calibrated"  # what transform/apply add (evaluate's CLI reads it without prob)
    loss_col: str | None = None
    method = "isotonic"
    engine = "auto"            # Python API: from the type of the data
    cli_engine = "local"       # command line: this process
    on_invalid = "raise"
    n_bins = 10
    strategy = "uniform"
    threshold = 0.5
    confidence = 0.95
    cost_fp = 1.0
    cost_fn = 1.0

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("distcal's defaults are read-only")


DEFAULTS = _Defaults()

METHODS = ("isotonic", "sigmoid", "histogram", "modl", "beta", "venn_abers")
# The scikit-learn estimator's methods (one-vs-rest with a binary method, or temperature;
# distcal.fit also takes MODL per class).
MULTICLASS_METHODS = ("isotonic", "sigmoid", "histogram", "beta", "venn_abers", "temperature")
INTERPOLATIONS = ("linear", "step", "centered")
STRATEGIES = ("uniform", "quantile")

# Method parameters and their defaults, per method.
METHOD_PARAMS: MappingProxyType[str, MappingProxyType[str, Any]] = MappingProxyType({
    "isotonic": MappingProxyType({"increasing": True, "interpolation": "linear",
                                  "y_min": None, "y_max": None}),
    "sigmoid": MappingProxyType({}),
    "histogram": MappingProxyType({"n_bins": DEFAULTS.n_bins, "strategy": DEFAULTS.strategy}),
    "modl": MappingProxyType({"max_groups": 100_000}),
    "temperature": MappingProxyType({}),
    "beta": MappingProxyType({}),
    "venn_abers": MappingProxyType({}),
})
