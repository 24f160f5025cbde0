"""Shared fixtures: the engine connection ``con`` and a helper that uploads a frame to it."""

from __future__ import annotations

import itertools

import ibis
import numpy as np
import pandas as pd
import pytest

_names = (f"t{i}" for i in itertools.count())


@pytest.fixture(scope="session", params=["duckdb"])
def con(request):
    """An engine connection; every metric test runs against each engine available."""
    if request.param == "duckdb":
        return ibis.duckdb.connect()
    raise ValueError(request.param)


@pytest.fixture
def upload(con):
    """upload(df) -> an Ibis table holding df in the engine under test."""

    def _upload(df: pd.DataFrame):
        return con.create_table(next(_names), df)

    return _upload


def calibration_data(n: int, seed: int = 0, *, groups: int = 0, ties: bool = False,
                     weights: bool = False) -> pd.DataFrame:
    """Scores with a sign-crossing miscalibration (binning matters), optional groups/ties/weights."""
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 3, n)
    if ties:
        p = np.round(p, 2)
    logit = np.log(np.clip(p, 1e-9, 1) / np.clip(1 - p, 1e-9, 1))
    y = (rng.random(n) < 1 / (1 + np.exp(-(1.5 * logit + 0.2)))).astype(np.int64)
    df = pd.DataFrame({"p": p, "y": y})
    if groups:
        df["g"] = rng.choice([f"g{i}" for i in range(groups)], n)
    if weights:
        df["w"] = rng.exponential(size=n)
    return df
