"""Every public function answers wrong types and missing columns with a ValueError or TypeError
(sqlcal's own subclasses) naming what is wrong, never a KeyError, an AttributeError or a raw
engine error."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.errors import EngineDataError, InvalidInputError

RNG = np.random.default_rng(0)
N = 300
FRAME = pd.DataFrame({"p": RNG.uniform(0.01, 0.99, N), "y": RNG.integers(0, 2, N),
                      "w": RNG.uniform(0.5, 2, N), "g": RNG.choice(["a", "b"], N),
                      "f": RNG.choice(["x", "y", "z"], N), "s": ["0.5"] * N,
                      "t": pd.Timestamp("2026-11-01")
                      + pd.to_timedelta(RNG.integers(0, 5, N), unit="D")})
#: the functions of a data source (score, label, ...) and the arguments they need besides
SOURCE_FUNCTIONS = {
    name: {"metric_series": {"time": "t"}, "segments": {"features": ["f"]},
           "segment_fix": {"features": ["f"]}, "multicalibration": {"features": ["f"]},
           "snapshot": {"time": "t", "store": ":memory:"}}.get(name, {})
    for name in sqlcal.__all__
    if not inspect.isclass(getattr(sqlcal, name))
    and list(inspect.signature(getattr(sqlcal, name)).parameters)[:1] == ["data"]
    and "score" in inspect.signature(getattr(sqlcal, name)).parameters
}
BAD = {
    "score column missing": ((FRAME,), {"score": "nope"}),
    "label column missing": ((FRAME,), {"label": "nope"}),
    "weight column missing": ((FRAME,), {"weight": "nope"}),
    "by column missing": ((FRAME,), {"by": "nope"}),
    "score not a name": ((FRAME,), {"score": 5}),
    "by not names": ((FRAME,), {"by": [1]}),
    "score column of text": ((FRAME,), {"score": "s"}),
    "where on a missing column": ((FRAME,), {"where": "nope > 1"}),
    "data a number": ((5,), {}),
    "data a dict": (({"p": [0.1]},), {}),
}


def test_the_sweep_covers_the_public_functions():
    assert len(SOURCE_FUNCTIONS) >= 35 and {"ece", "report", "snapshot", "segments"} <= set(
        SOURCE_FUNCTIONS)


@pytest.mark.parametrize("name", sorted(SOURCE_FUNCTIONS))
def test_wrong_types_and_missing_columns_are_value_or_type_errors(name):
    function = getattr(sqlcal, name)
    for case, (args, change) in BAD.items():
        kwargs = {"score": "p", "label": "y", **SOURCE_FUNCTIONS[name], **change}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises((ValueError, TypeError)) as e:
                function(*args, **kwargs)
        assert not isinstance(e.value, KeyError), (name, case, e.value)


@pytest.mark.parametrize("call, kind", [
    (lambda: sqlcal.class_summary(5), TypeError),
    (lambda: sqlcal.class_summary(pd.DataFrame({"ece": [0.1]})), ValueError),
    (lambda: sqlcal.summary_sql("ece", table=5, score="p", label="y"), TypeError),
    (lambda: sqlcal.segment_fix(FRAME, score="p", label="y", features=["f"],
                                segments=pd.DataFrame({"x": [1]})), ValueError),
    (lambda: sqlcal.segment_fix(FRAME, score="p", label="y", features=["f"], segments=5),
     TypeError),
    (lambda: sqlcal.snapshot(FRAME, score="p", label="y", time="g", store=":memory:"),
     InvalidInputError),
    (lambda: sqlcal.snapshot(FRAME, score="p", label="y", time="y", store=":memory:"),
     InvalidInputError),
], ids=["class_summary(5)", "class_summary without class", "summary_sql(table=5)",
        "segment_fix(segments=a foreign frame)", "segment_fix(segments=5)",
        "snapshot(time=text)", "snapshot(time=int)"])
def test_other_public_functions_check_their_arguments(call, kind):
    with pytest.raises(kind) as e:
        call()
    assert not isinstance(e.value, KeyError)


def test_the_engine_refusing_the_rows_is_a_value_error(con, upload):
    """A condition whose cast fails on some rows: the engine's error comes as EngineDataError
    (a ValueError), chained to the engine's own."""
    if con.name == "pyspark" and con._session.conf.get("spark.sql.ansi.enabled") != "true":
        pytest.skip("Spark without ANSI mode casts what it cannot read to NULL: no error")
    t = upload(FRAME[["p", "y", "s"]].assign(s=["x"] * N))
    with pytest.raises(EngineDataError) as e:
        sqlcal.ece(t, score="p", label="y", where="CAST(s AS INTEGER) > 1")
    assert e.value.__cause__ is not None and isinstance(e.value, ValueError)
