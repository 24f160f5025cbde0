"""The declared option table and the functions' bodies agree: a value on the edge of an option's
declared range passes the central check and then runs (a body that refuses what the table admits
answers a caller who followed the message with a second, different refusal)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal import options
from sqlcal.metrics._registry import registered
from sqlcal.options import BudgetError

#: options a metric cannot run without
REQUIRED = {"decision_loss": {"threshold": 0.3},
            "expected_cost": {"actions": {"act": (0.0, 1.0), "wait": (1.0, 0.0)}}}
#: options that only apply together with another one
WITH = {("smooth_ece", "confidence"): {"bootstrap": 20},
        ("distance_to_calibration", "lower_levels"): {"grid": 4},
        ("distance_to_calibration", "grid"): {"lower_levels": 4},
        ("tce", "n_max"): {"n_min": 0}, ("tce_bins", "n_max"): {"n_min": 0}}


def edges(o: options.Option) -> list:
    """The extreme values the declared range admits: a closed bound itself, the nearest
    representable value inside an open one (the nearest power of two for those options)."""
    out = []
    for bound, inward, is_open in ((o.low, math.inf, o.open_low), (o.high, -math.inf,
                                                                   o.open_high)):
        if bound is None:
            continue
        if o.kind in ("int", "count"):
            value = int(bound) + (0 if not is_open else (1 if inward > 0 else -1))
            if o.power_of_two:
                value = (1 << max(value - 1, 0).bit_length() if inward > 0
                         else 1 << (value.bit_length() - 1))
        else:
            value = float(np.nextafter(bound, inward)) if is_open else float(bound)
        out.append(value)
    return out


def bounded(function: str) -> list[tuple[str, object]]:
    return [(name, value) for name, o in options.declared([function])[function].items()
            if o.kind in ("int", "float", "count", "floats") for value in edges(o)]


CASES = [(f, name, value) for f in registered() for name, value in bounded(f)]


@pytest.fixture(scope="module")
def frame():
    # few rows: the test asks whether a body accepts an option's edge value, which the rows do
    # not decide; the work at some edges grows with them (TCE's bootstrap=10**6 replicates per
    # bin, n_max=0's bin per row: 34 s and 18 s each at 400 rows, a tenth of that at 40)
    rng = np.random.default_rng(5)
    p = rng.beta(2, 3, 40)
    return pd.DataFrame({"p": p, "y": (rng.random(40) < p).astype(int)})


@pytest.mark.parametrize("function, name, value", CASES, ids=lambda v: str(v))
def test_every_metric_runs_at_the_edges_of_its_declared_ranges(frame, function, name, value):
    kw = {**REQUIRED.get(function, {}), **WITH.get((function, name), {}), name: value}
    try:
        registered()[function].function(frame, score="p", label="y", **kw)
    except BudgetError:
        pass  # the central check's budget: the declared table speaks, not the body


def test_detect_bins_edge_is_the_bodys_limit(tmp_path):
    # detect's declared range of bins was [1, 4096] while its body refused more than 64
    store = str(tmp_path / "s.duckdb")
    rng = np.random.default_rng(1)
    n = 4000
    p = rng.beta(2, 5, n)
    t = pd.Timestamp("2026-06-01") + pd.to_timedelta(rng.integers(0, 20 * 86400, n), "s")
    df = pd.DataFrame({"p": p, "y": (rng.random(n) < p).astype(int), "t": t})
    sqlcal.snapshot(df, score="p", label="y", time="t", store=store, as_of="2026-07-30",
                    bins=(), ls_ece_sigma=(), smooth_grids=())
    high = options.option("detect", "bins").high
    found = sqlcal.detect(store, bins=int(high), reference_days=5, checks=30)
    assert found.info["bins"] == high
    with pytest.raises(options.OptionError, match=r"detect\(\): bins must be an integer in "
                                                  rf"\[1, {int(high)}\]"):
        sqlcal.detect(store, bins=int(high) + 1)
