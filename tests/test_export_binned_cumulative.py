"""The refining forms of the binned and cumulative families export the levels: quantile ECE,
Hosmer-Lemeshow and the exact cutoff error (with Kuiper and KS) run summary_sql's levels
statement on each engine, and from_summaries, whose every follow-up (the zoomed histograms, the
levels of the wanted cells, the window's extremes) is evaluated in pandas from those levels,
gives the direct call's table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.metrics import cells, cumulative
from tests.conftest import calibration_data

DIALECT = {"duckdb": "duckdb", "postgres": "postgres", "pyspark": "spark"}

REFINING = [("ece", {"strategy": "quantile"}), ("hosmer_lemeshow", {}), ("cutoff_error", {}),
            ("kuiper", {}), ("ks", {})]


def _run(con, text: str) -> pd.DataFrame:
    text = text.rstrip().rstrip(";")
    if con.name == "pyspark":
        return con._session.sql(text).toPandas()
    return con.sql(text).to_pandas()


def _numbers(frame: pd.DataFrame) -> np.ndarray:
    return frame[[c for c in frame if frame[c].dtype.kind in "fiub"]].to_numpy(float)


@pytest.mark.parametrize("zoom", [False, True])
@pytest.mark.parametrize("weighted", [True, False])
def test_refining_forms_round_trip_through_the_levels(con, upload, monkeypatch, weighted, zoom):
    if zoom:  # every follow-up stage runs: zooms of both families, levels, the window
        monkeypatch.setattr(cells, "LEVEL_ROWS", 10)
        monkeypatch.setattr(cumulative, "WINDOW_ROWS", 0)
    df = calibration_data(1500, seed=31, groups=2, ties=True, weights=weighted)
    df["p"] = np.clip(df["p"] + np.random.default_rng(31).integers(0, 50, len(df)) * 1e-5, 0, 1)
    df.loc[:4, "g"] = None
    if weighted:
        df["w"] = np.round(df["w"] * 4) / 4 + 0.25
    t = upload(df)
    kw = dict(score="p", label="y", by="g", weight="w" if weighted else None)
    for metric, options in REFINING:
        statements = sqlcal.summary_sql(metric, dialect=DIALECT[con.name], table=t.get_name(),
                                        **kw, **options)
        assert list(statements) == ["levels"], metric
        frames = {name: _run(con, sql) for name, sql in statements.items()}
        got = sqlcal.from_summaries(metric, frames, **kw, **options)
        want = getattr(sqlcal, metric)(t, **kw, **options)
        assert list(got.columns) == list(want.columns), metric
        assert [None if pd.isna(g) else g for g in got["g"]] == \
            [None if pd.isna(g) else g for g in want["g"]], metric
        np.testing.assert_allclose(_numbers(got), _numbers(want), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{metric} {options}")
