"""sqlcal: calibration metrics for probabilistic classifiers, computed inside the data warehouse.

The engine reduces the rows to small summaries (Ibis queries); numpy and scipy finish the metric.
"""

# the families register their metrics as they are imported (sqlcal.metrics._registry): this
# order is the catalogue's and the report's, so the import order is kept by hand
# ruff: noqa: I001
from sqlcal.metrics.binned import (brier_decomposition, debiased_ece, ece, hosmer_lemeshow,
                                   reliability)
from sqlcal.metrics.scores import brier, calibration_in_the_large, log_loss, spiegelhalter
from sqlcal.metrics.cumulative import cutoff_error, ks, kuiper
from sqlcal.metrics.tce import tce, tce_bins
from sqlcal.metrics.distance import (distance_to_calibration, interval_calibration_error,
                                     lipschitz_calibration_error)
from sqlcal.metrics.decision import (calibration_decision_loss, decision_loss,
                                     decision_risk_gap, expected_cost)
from sqlcal.metrics.smooth import ls_ece, smooth_ece, smooth_reliability
from sqlcal.metrics.lowrate import calibration_ratio, normalized_entropy
from sqlcal.query.layouts import multiclass
from sqlcal.recalibration.corp import decompose
from sqlcal.recalibration.fits import calibration_slope, isotonic, platt
from sqlcal.recalibration.temperature import temperature_scaling
from sqlcal.metrics.classwise import class_summary, classwise
from sqlcal.metrics.compare import compare
from sqlcal.reporting.report_table import report
from sqlcal.reporting.scheduled import metric_series
from sqlcal.inputs.sources import InvalidInputError, Source
from sqlcal.query.executor import source
from sqlcal.export.metric_sql import from_summaries, summary_sql
from sqlcal.monitor.store import snapshot
from sqlcal.monitor.stored import stored
from sqlcal.monitor.detect import detect
from sqlcal.audit.discovery import multicalibration, segment_fix, segments

from sqlcal._version import __version__ as __version__


def __getattr__(name: str):
    # sqlcal.plots needs matplotlib (the "plot" extra): imported on first use, not with sqlcal
    if name == "plots":
        import importlib

        return importlib.import_module("sqlcal.plots")
    raise AttributeError(f"module 'sqlcal' has no attribute {name!r}")

__all__ = [
    "InvalidInputError",
    "Source",
    "brier",
    "brier_decomposition",
    "calibration_slope",
    "class_summary",
    "classwise",
    "calibration_decision_loss",
    "calibration_in_the_large",
    "compare",
    "calibration_ratio",
    "cutoff_error",
    "decision_loss",
    "decision_risk_gap",
    "detect",
    "debiased_ece",
    "decompose",
    "distance_to_calibration",
    "ece",
    "expected_cost",
    "from_summaries",
    "hosmer_lemeshow",
    "interval_calibration_error",
    "isotonic",
    "ks",
    "kuiper",
    "lipschitz_calibration_error",
    "log_loss",
    "metric_series",
    "multicalibration",
    "multiclass",
    "normalized_entropy",
    "platt",
    "ls_ece",
    "reliability",
    "segment_fix",
    "segments",
    "report",
    "source",
    "smooth_ece",
    "temperature_scaling",
    "snapshot",
    "smooth_reliability",
    "spiegelhalter",
    "stored",
    "summary_sql",
    "tce",
    "tce_bins",
]
