"""Every public metric on a stored window: it equals the same metric on a scan of the window's
rows (1e-9 relative), or it raises the documented error naming the snapshot option that would
store what it reads; and its result carries the window's trust columns.

Oracle: the metric on a scan of the same rows (each metric is tested against brute force and the
peers elsewhere); the table below says which metrics a store without levels serves, so a change
of what is served shows here.
"""

from __future__ import annotations

import re
import warnings

import ibis
import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.options import OptionError

DAY0 = pd.Timestamp("2026-10-01")
OPTIONS = dict(score="p", label="y", weight="w", by="g", time="t", label_time="lt",
               as_of="2027-01-01")

#: public binary metrics with the options they need (data first, as a user calls them)
METRICS = {
    "brier": lambda s: sqlcal.brier(s),
    "brier_decomposition": lambda s: sqlcal.brier_decomposition(s),
    "calibration_decision_loss": lambda s: sqlcal.calibration_decision_loss(s),
    "calibration_in_the_large": lambda s: sqlcal.calibration_in_the_large(s),
    "calibration_ratio": lambda s: sqlcal.calibration_ratio(s),
    "calibration_slope": lambda s: sqlcal.calibration_slope(s),
    "cutoff_error": lambda s: sqlcal.cutoff_error(s),
    "cutoff_error_grid": lambda s: sqlcal.cutoff_error(s, method="grid"),
    "debiased_ece": lambda s: sqlcal.debiased_ece(s),
    "decision_loss": lambda s: sqlcal.decision_loss(s, threshold=0.3),
    "decision_risk_gap": lambda s: sqlcal.decision_risk_gap(s),
    "decompose": lambda s: sqlcal.decompose(s),
    "distance_to_calibration": lambda s: sqlcal.distance_to_calibration(s),
    "ece": lambda s: sqlcal.ece(s),
    "ece_quantile": lambda s: sqlcal.ece(s, strategy="quantile"),
    "expected_cost": lambda s: sqlcal.expected_cost(s, rules=[(-1, 0.3, 1.0, 0.0),
                                                              (0.3, 1, 0.0, 0.5)]),
    "hosmer_lemeshow": lambda s: sqlcal.hosmer_lemeshow(s),
    "interval_calibration_error": lambda s: sqlcal.interval_calibration_error(s),
    "isotonic": lambda s: sqlcal.isotonic(s).table,
    "ks": lambda s: sqlcal.ks(s),
    "kuiper": lambda s: sqlcal.kuiper(s),
    "lipschitz_calibration_error": lambda s: sqlcal.lipschitz_calibration_error(s),
    "log_loss": lambda s: sqlcal.log_loss(s),
    "ls_ece": lambda s: sqlcal.ls_ece(s),
    "normalized_entropy": lambda s: sqlcal.normalized_entropy(s),
    "platt": lambda s: sqlcal.platt(s).table,
    "reliability": lambda s: sqlcal.reliability(s),
    "report": lambda s: sqlcal.report(s, metrics=["ece", "brier", "log_loss",
                                                  "calibration_in_the_large", "spiegelhalter"]),
    "smooth_ece": lambda s: sqlcal.smooth_ece(s),
    "smooth_reliability": lambda s: sqlcal.smooth_reliability(s),
    "spiegelhalter": lambda s: sqlcal.spiegelhalter(s),
    "tce": lambda s: sqlcal.tce(s),
    "tce_bins": lambda s: sqlcal.tce_bins(s),
}
#: what a store without levels cannot serve: each raises an OptionError naming levels=True
NEEDS_LEVELS = {
    "calibration_decision_loss", "calibration_slope", "cutoff_error", "decision_loss",
    "decision_risk_gap", "decompose", "distance_to_calibration", "ece_quantile",
    "expected_cost", "hosmer_lemeshow", "interval_calibration_error", "isotonic", "ks",
    "kuiper", "lipschitz_calibration_error", "platt", "tce", "tce_bins",
}
# (normalized_entropy reads Σwℓ², Σwyℓ and their variance-weight forms: the totals of summary
# version 3 hold them, issue 34)
#: the rows-only functions (features, time stamps of rows): refused on a stored window
NEEDS_ROWS = {
    "multicalibration": lambda s: sqlcal.multicalibration(s, score="p", label="y",
                                                          features=["g"]),
    "metric_series": lambda s: sqlcal.metric_series(s, time="t"),
    "segments": lambda s: sqlcal.segments(s, score="p", label="y", features=["g"]),
}
#: results whose table is rebuilt from another's and keeps only its own columns
NO_FACTS = {"isotonic", "platt"}  # a map's table describes the map, not the window


def rows(n: int = 3000, days: int = 4, seed: int = 0, slope: float = 1.15) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 5, n)
    p = np.where(rng.random(n) < 0.5, np.round(p, 3), p)  # ties, and cells of several scores
    y = (rng.random(n) < np.clip(slope * p, 0, 1)).astype(np.int64)
    t = DAY0 + pd.to_timedelta(rng.integers(0, days * 86400, n), unit="s")
    lt = pd.Series(t + pd.to_timedelta(rng.integers(0, 2 * 86400, n), unit="s"))
    return pd.DataFrame({"p": p, "y": y, "w": rng.integers(1, 4, n).astype(float),
                         "g": rng.choice(["a", "b"], n), "t": pd.Series(t),
                         "lt": lt.where(y == 1)})


@pytest.fixture(scope="module", params=[False, True], ids=["cells", "levels"])
def window(request):
    df = rows()
    store = ibis.duckdb.connect()
    sqlcal.snapshot(df, store=store, levels=request.param, **OPTIONS)
    scan = sqlcal.source(df, score="p", label="y", weight="w", by="g")
    return request.param, sqlcal.stored(store, maturity="all"), scan


def assert_same_values(a: pd.DataFrame, b: pd.DataFrame, what: str) -> None:
    assert len(a) == len(b), what
    for col in b.columns:
        x, y = a[col].to_numpy(), b[col].to_numpy()
        if b[col].dtype.kind in "fc":
            np.testing.assert_allclose(x.astype(float), y.astype(float), rtol=1e-9, atol=1e-12,
                                       err_msg=f"{what}: {col}")
        else:
            assert [str(v) for v in x] == [str(v) for v in y], f"{what}: {col}"


@pytest.mark.parametrize("name", sorted(METRICS))
def test_every_metric_on_a_stored_window_equals_the_scan_or_names_the_option(window, name):
    levels, src, scan = window
    metric = METRICS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in NEEDS_LEVELS and not levels:
            with pytest.raises(OptionError, match=re.escape("snapshot with levels=True")):
                metric(src)
            return
        got, want = metric(src), metric(scan)
    facts = ["window", "maturity", "window_exact", "window_bound"]
    if name not in NO_FACTS:
        assert got[facts].drop_duplicates().values.tolist() == [
            ["2026-10-01..2026-10-04 (4 periods)", "all", True, 0.0]], name
    # every column, the intervals included (LS-ECE's from summary version 4's split moments of
    # the logit grid): the store keeps what they read
    assert_same_values(got, want, name)


@pytest.mark.parametrize("name", sorted(NEEDS_ROWS))
def test_functions_that_read_rows_refuse_a_stored_window(window, name):
    _, src, _ = window
    with pytest.raises((TypeError, ValueError), match="summary store|Source"):
        NEEDS_ROWS[name](src)


def test_the_automatic_smooth_ece_bandwidth_reads_grids_only_the_levels_hold():
    """On a well-calibrated model past about 10^4 rows a group, the automatic bandwidth's
    search reads relplot's grids finer than the stored one (1000 intervals): refused naming the
    options without levels, and equal to the scan with them; a fixed bandwidth >= 0.01 reads
    the stored grid."""
    df = rows(n=40_000, days=3, seed=2, slope=1.0)
    scan = sqlcal.source(df, score="p", label="y", weight="w", by="g")
    for levels in (False, True):
        store = ibis.duckdb.connect()
        sqlcal.snapshot(df, store=store, levels=levels, **OPTIONS)
        src = sqlcal.stored(store, maturity="all")
        fixed = sqlcal.smooth_ece(src, sigma=0.02)
        assert_same_values(fixed, sqlcal.smooth_ece(scan, sigma=0.02), "sigma=0.02")
        if levels:
            assert_same_values(sqlcal.smooth_ece(src), sqlcal.smooth_ece(scan), "automatic")
        else:
            with pytest.raises(OptionError, match=r"levels=True.*sigma="):
                sqlcal.smooth_ece(src)
