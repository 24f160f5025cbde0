"""Bad input gets a clear error naming the column, the problem and the count; drop mode counts."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal import InvalidInputError


def frame(**cols):
    base = {"p": [0.1, 0.4, 0.6, 0.9], "y": [0, 0, 1, 1], "w": [1.0, 2.0, 1.0, 0.5],
            "g": ["a", "a", "b", "b"]}
    base.update(cols)
    return pd.DataFrame(base)


CASES = [
    (dict(p=[0.1, None, None, 0.9]), "score column 'p' has 2 rows that are NULL"),
    (dict(p=[0.1, 1.5, -0.2, 0.9]), "score column 'p' has 2 rows outside [0, 1]"),
    (dict(p=[0.1, np.inf, 0.5, 0.9]), "score column 'p' has 1 rows outside [0, 1]"),
    (dict(y=[0, 2, 1, 1]), "label column 'y' has 1 rows outside [0, 1]"),
    (dict(y=[0, 0.5, 1, 1]), "label column 'y' has 1 rows outside {0, 1}"),
    (dict(y=[0, None, 1, 1]), "label column 'y' has 1 rows that are NULL"),
    (dict(w=[1.0, -1.0, 1.0, 1.0]), "weight column 'w' has 1 rows negative"),
    (dict(w=[1.0, None, 1.0, 1.0]), "weight column 'w' has 1 rows that are NULL"),
    (dict(w=[1.0, np.inf, 1.0, 1.0]), "weight column 'w' has 1 rows infinite"),
]


# each first scan of a source validates: equal-width bins, the fine score histogram, the totals
FIRST_SCANS = [
    lambda t: sqlcal.ece(t, score="p", label="y", weight="w"),
    lambda t: sqlcal.ece(t, score="p", label="y", weight="w", convention="relplot"),
    lambda t: sqlcal.hosmer_lemeshow(t, score="p", label="y", weight="w"),
    lambda t: sqlcal.brier(t, score="p", label="y", weight="w"),
    lambda t: sqlcal.cutoff_error(t, score="p", label="y", weight="w", by="g"),
    lambda t: sqlcal.tce(t, score="p", label="y", weight="w", by="g"),
    lambda t: sqlcal.ls_ece(t, score="p", label="y", weight="w", by="g"),
]


@pytest.mark.parametrize("cols, message", CASES)
@pytest.mark.parametrize("first", range(len(FIRST_SCANS)))
def test_bad_rows_raise_with_column_problem_and_count(upload, cols, message, first):
    t = upload(frame(**cols))
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        FIRST_SCANS[first](t)


@pytest.mark.parametrize("metric", [sqlcal.brier, sqlcal.ece, sqlcal.cutoff_error, sqlcal.tce,
                                    sqlcal.ls_ece])
def test_nan_is_reported_as_nan(con, metric):
    # NaN survives in an engine table (pandas uploads turn NaN into NULL, so insert it in SQL)
    t = con.sql("SELECT * FROM (VALUES (0.2::DOUBLE, 1), ('NaN'::DOUBLE, 0), ('NaN'::DOUBLE, 1)) "
                "AS v(p, y)")
    with pytest.raises(InvalidInputError, match=re.escape("score column 'p' has 2 rows that are NaN")):
        metric(t, score="p", label="y")


def test_missing_and_mistyped_columns(upload):
    t = upload(frame(s=["x", "y", "z", "w"]))
    with pytest.raises(InvalidInputError, match="label column 'label' is not in the table"):
        sqlcal.ece(t, score="p", label="label")
    with pytest.raises(InvalidInputError, match="group key column 'segment' is not in the table"):
        sqlcal.ece(t, score="p", label="y", by="segment")
    with pytest.raises(InvalidInputError, match="score column 's' has type string"):
        sqlcal.ece(t, score="s", label="y")


def test_empty_table_is_an_error(upload):
    t = upload(frame())
    with pytest.raises(InvalidInputError, match="no rows"):
        sqlcal.ece(t, score="p", label="y", where=t.p > 5)


def test_scores_and_labels_are_required(upload):
    with pytest.raises(TypeError, match="score= and label= are required"):
        sqlcal.ece(upload(frame()), score="p")


def test_booleans_and_decimals_are_fine(con):
    t = con.sql("SELECT p::DECIMAL(6,3) AS p, y::BOOLEAN AS y FROM (VALUES (0.25, 0), (0.75, 1)) "
                "AS v(p, y)")
    got = sqlcal.brier(t, score="p", label="y")
    assert got.brier.iloc[0] == pytest.approx(0.0625, abs=1e-15)


def test_drop_reports_counts_per_group(upload):
    df = frame(p=[0.1, None, 1.5, 0.9], w=[1.0, 1.0, 1.0, -2.0])
    with pytest.warns(UserWarning, match="dropped"):
        src = sqlcal.source(upload(df), score="p", label="y", weight="w", by="g",
                            on_invalid="drop")
    # counted per group, under the key's internal name (src.present gives it back its name)
    assert src.present(src.dropped).set_index("g").n_dropped.to_dict() == {"a": 1, "b": 2}
    with pytest.warns(UserWarning, match="dropped"):
        got = sqlcal.brier(upload(df), score="p", label="y", weight="w", by="g",
                           on_invalid="drop")
    assert got.columns[-1] == "n_dropped"
    assert got.set_index("g").n_dropped.to_dict() == {"a": 1, "b": 2}
    # group b lost all its rows: it is still reported, with a NULL value and no exception
    b = got.set_index("g").loc["b"]
    assert b.n == 0 and b.W == 0 and np.isnan(b.brier)
    np.testing.assert_allclose(got.set_index("g").brier["a"], 0.01)


def test_a_group_of_zero_weights_is_an_absent_group(upload):
    # a row of weight 0 is an absent row, so a group whose rows all weigh 0 is no group at all
    df = frame(w=[1.0, 1.0, 0.0, 0.0])
    t = upload(df)
    kept = upload(df[df.w > 0])
    for metric in (sqlcal.ece, sqlcal.brier, sqlcal.log_loss, sqlcal.spiegelhalter,
                   sqlcal.hosmer_lemeshow, sqlcal.brier_decomposition,
                   sqlcal.calibration_in_the_large):
        got = metric(t, score="p", label="y", weight="w", by="g")
        want = metric(kept, score="p", label="y", weight="w", by="g")
        assert got["g"].tolist() == ["a"], metric.__name__
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)
    with pytest.raises(InvalidInputError, match="no rows"):
        sqlcal.brier(upload(frame(w=[0.0] * 4)), score="p", label="y", weight="w")


def test_soft_labels_only_where_supported(upload):
    df = frame(y=[0.2, 0.4, 0.9, 1.0])
    t = upload(df)
    got = sqlcal.brier(t, score="p", label="y", soft_labels=True)
    np.testing.assert_allclose(got.brier.iloc[0], np.mean((df.y - df.p) ** 2))
    with pytest.raises(InvalidInputError, match="needs labels in {0, 1}.* 3 rows"):
        sqlcal.spiegelhalter(t, score="p", label="y", soft_labels=True)


def test_source_and_keywords_not_both(upload):
    src = sqlcal.source(upload(frame()), score="p", label="y")
    with pytest.raises(TypeError, match="not both"):
        sqlcal.ece(src, score="p", label="y")


def test_bad_options(upload):
    t = upload(frame())
    with pytest.raises(ValueError, match="norm must be one of"):
        sqlcal.ece(t, score="p", label="y", norm="l3")
    with pytest.raises(ValueError, match="convention must be one of"):
        sqlcal.ece(t, score="p", label="y", convention="torch")
    with pytest.raises(ValueError, match="bins must be a positive integer"):
        sqlcal.ece(t, score="p", label="y", bins=0)
