"""The weight checks of the first scan on every engine: whether every weight is a whole number
(``Source.integer_weights``, read by the metrics that tell frequency from sampling weights), the
weights that make the input invalid, and the rows of weight 0 left out (issue 14: these checks were
made cheaper; their outcome must not change)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal import InvalidInputError

TWO52 = 2.0**52

# valid weight columns (finite, >= 0): whole numbers, large ones included (every double from 2^52
# up is whole), and fractions down to the smallest subnormal
WEIGHTS = {
    "small whole": [1.0, 2.0, 3.0, 7.0],
    "whole with zeros": [0.0, 2.0, -0.0, 5.0],
    "around 2^52": [TWO52 - 1, TWO52, TWO52 + 2, 3.0],
    "above 2^53": [2.0**53 + 2, 2.0**54 - 2, 2.0**60, 1.0],
    "large": [1e140, 2.0**465, 1.0, 2.0],  # up to the largest weight accepted
    "one half": [1.0, 0.5, 2.0, 3.0],
    "just below 2^52": [1.0, TWO52 - 0.5, 2.0, 3.0],
    "one ulp above 1": [1.0, 1.0 + 2.0**-52, 2.0, 3.0],
    "tiny": [1.0, 1e-300, 2.0, 3.0],
    # subnormal (not 5e-324: PostgreSQL raises "underflow" when w * p rounds to 0)
    "subnormal": [1.0, 1e-310, 2.0, 3.0],
    "2.5 and 0.7": [2.5, 0.7, 1.0, 4.0],
}


def frame(w):
    return pd.DataFrame({"p": [0.1, 0.4, 0.6, 0.9], "y": [0, 0, 1, 1], "w": w,
                         "g": ["a", "a", "b", "b"]})


def whole(w) -> bool:
    w = np.asarray(w, dtype=float)
    w = w[w != 0]
    return bool(np.all(w == np.floor(w)))


@pytest.mark.parametrize("name", list(WEIGHTS))
def test_integer_weights_is_exact(upload, name):
    w = WEIGHTS[name]
    t = upload(frame(w))
    src = sqlcal.source(t, score="p", label="y", weight="w", by="g")
    got = sqlcal.ece(src)  # the first scan validates and sets integer_weights
    assert src.integer_weights is whole(w), name
    # rows of weight 0 (either sign) are absent rows
    assert got["n"].sum() == int(np.count_nonzero(w)), name
    # the counting path (on_invalid="drop") decides the same
    dropped = sqlcal.source(t, score="p", label="y", weight="w", by="g", on_invalid="drop")
    assert dropped.integer_weights is whole(w), name
    assert dropped.dropped["n"].sum() == int(np.count_nonzero(w)), name


def test_whole_and_fractional_weights_are_told_apart_in_each_group(upload):
    # a fraction in one group only: the flag is over the whole table
    src = sqlcal.source(upload(frame([1.0, 2.0, 3.0, 0.25])), score="p", label="y", weight="w",
                        by="g")
    sqlcal.brier(src)
    assert src.integer_weights is False


def test_nan_null_negative_and_infinite_weights_are_named(con):
    # NaN survives only in SQL (a pandas upload turns it into NULL); 0 and -0.0 rows are absent
    t = con.sql("SELECT * FROM (VALUES (0.2::DOUBLE, 1, 1.0::DOUBLE), (0.3::DOUBLE, 0, 'NaN'::DOUBLE), "
                "(0.4::DOUBLE, 1, '-Infinity'::DOUBLE), (0.5::DOUBLE, 0, 0.0::DOUBLE), "
                "(0.6::DOUBLE, 1, CAST(NULL AS DOUBLE)), (0.7::DOUBLE, 0, '-0.0'::DOUBLE), "
                "(0.8::DOUBLE, 1, -2.5::DOUBLE)) AS v(p, y, w)")
    with pytest.warns(UserWarning, match="dropped"):
        src = sqlcal.source(t, score="p", label="y", weight="w", on_invalid="drop")
    # of 7 rows, 2 weigh 0 (absent, not dropped) and 4 are invalid: 1 row left, weight 1
    assert int(src.dropped["n_rows"].sum()) == 5 and int(src.dropped["n"].sum()) == 1
    assert src.integer_weights is True
    with pytest.raises(InvalidInputError) as err:
        sqlcal.ece(t, score="p", label="y", weight="w")
    message = str(err.value)
    for part in ("weight column 'w' has 1 rows that are NaN",
                 "weight column 'w' has 2 rows negative",
                 "weight column 'w' has 1 rows infinite"):
        assert re.search(re.escape(part), message), (part, message)
    assert "weight column 'w' has 1 rows that are NULL" in message, message


@pytest.mark.parametrize("weights", [[1e160, 1.0, 2.0, 3.0], [1e300, 0.5, 2.0, 3.0]])
def test_weights_whose_squares_overflow_are_refused(upload, weights):
    # the variance sums (Σw², Σw²·ℓ²...) would overflow to inf and give z = 0, p = 1 without a
    # word: the validating aggregate of the first scan refuses them, naming the column
    t = upload(frame(weights))
    for call in (lambda: sqlcal.spiegelhalter(t, score="p", label="y", weight="w"),
                 lambda: sqlcal.normalized_entropy(t, score="p", label="y", weight="w")):
        with pytest.raises(InvalidInputError, match=r"weight column 'w' has 1 rows above 1e\+140"):
            call()
    with pytest.warns(UserWarning, match=r"1 rows above 1e\+140"):
        src = sqlcal.source(t, score="p", label="y", weight="w", on_invalid="drop")
    assert int(src.dropped["n_dropped"].sum()) == 1
    got = sqlcal.spiegelhalter(src)
    kept = frame(weights).iloc[1:]
    p, y, w = kept.p.to_numpy(), kept.y.to_numpy(), kept.w.to_numpy()
    q = 1 - 2 * p
    var = np.sum((w * w if src.integer_weights is False else w) * q * q * p * (1 - p))
    np.testing.assert_allclose(got.z[0], np.sum(w * (y - p) * q) / np.sqrt(var), rtol=1e-12)
