"""Hostile input: no caller text reaches the engine as a statement, and nothing outside what is
measured is read or changed.

``where=`` text is parsed as one expression over the measured table's columns (sqlcal.inputs.condition);
table, column and key names are looked up among the ones that exist and quoted by Ibis. Each case
runs on every engine, and afterwards every table of the connection is unchanged.
"""

from __future__ import annotations

import re
import string

import ibis
import numpy as np
import pandas as pd
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sqlcal
from sqlcal.inputs.condition import ConditionError, parse_condition
from sqlcal.inputs.sources import InvalidInputError


def _data(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = np.round(rng.random(n), 3)
    return pd.DataFrame({
        "p": p,
        "y": (rng.random(n) < p).astype(np.int64),
        "g": rng.choice(["a", "b", "c"], n),
        "k": rng.integers(0, 10, n),
    })


def _brier(df: pd.DataFrame) -> float:
    return float(np.mean((df.p - df.y) ** 2))


@pytest.fixture
def guarded(con, upload):
    """The measured table and a ``secret`` table beside it; yields (table, frame, snapshot) where
    ``snapshot()`` lists every table of the connection with its rows, to compare afterwards."""
    df = _data()
    secret = upload(pd.DataFrame({"a": [1, 2, 3]}))
    table = upload(df)

    def snapshot():
        names = sorted(con.list_tables())
        return names, secret.count().to_pyarrow().as_py(), table.count().to_pyarrow().as_py()

    before = snapshot()
    yield table, df, secret.get_name()
    assert snapshot() == before, "a table of the connection changed"


def _hostile(secret: str) -> list[tuple[str, str]]:
    """(condition, what the refusal says)."""
    return [
        (f"1=1; DROP TABLE {secret}", "2 statements"),
        # engines whose dialect has no ATTACH refuse it while parsing
        (f"1=1; ATTACH 'other.duckdb' AS o; DROP TABLE o.{secret}",
         "statements|not a SQL condition"),
        (f"DROP TABLE {secret}", "not allowed"),
        (f"DELETE FROM {secret}", "not allowed"),
        (f"COPY {secret} TO 'stolen.csv'", "not allowed"),
        (f"p IN (SELECT a FROM {secret})", "not a subquery"),
        (f"p IN (SELECT a FROM {secret}) OR (p > 0 AND p IN (1, (SELECT 2)))", "not a subquery"),
        (f"p > (SELECT max(a) FROM {secret})", "subqueries are not allowed"),
        (f"EXISTS (SELECT 1 FROM {secret})", "subqueries are not allowed"),
        (f"p > 0 UNION SELECT a, a, a, a FROM {secret}", "not allowed"),
        (f"{secret}.a = 1", "not qualified"),
        ("read_csv('/etc/passwd') IS NOT NULL", "function is not allowed"),
        ("pg_sleep(5) IS NULL", "function is not allowed"),
        ("current_setting('data_directory') = 'x'", "function is not allowed"),
        ("p = ?", "parameters are not allowed"),
        ("p > 0) OR (1 = 1", "not a SQL condition"),
        ("'; DROP TABLE x; --", "not a SQL condition"),
        ("no_such_column > 0", "'no_such_column', which is not in the table"),
        ("p", "not a condition"),
        ("p > 'text'", "cannot apply GT"),
        ("", "empty"),
    ]


def test_where_injection_is_refused(guarded):
    table, df, secret = guarded
    for condition, says in _hostile(secret):
        with pytest.raises(ConditionError, match=None) as info:
            sqlcal.brier(table, score="p", label="y", where=condition)
        assert re.search(says, str(info.value)), (condition, str(info.value))
        assert isinstance(info.value, InvalidInputError)  # exit code 2 in the CLI


def test_comments_and_a_trailing_semicolon_are_just_text(guarded):
    table, df, secret = guarded
    want = df[df.p > 0.5]
    for condition in (f"p > 0.5 -- ; DROP TABLE {secret}", f"p > 0.5 /* ; DROP TABLE {secret} */",
                      "p > 0.5;"):
        got = sqlcal.brier(table, score="p", label="y", where=condition)
        assert int(got.n.iloc[0]) == len(want)
        np.testing.assert_allclose(got.brier.iloc[0], _brier(want), rtol=1e-12)


def test_names_that_are_not_columns_are_refused_by_name(guarded):
    table, df, secret = guarded
    evil = f"p; DROP TABLE {secret}"
    for role, kwargs in (("score", dict(score=evil, label="y")),
                         ("label", dict(score="p", label=evil)),
                         ("weight", dict(score="p", label="y", weight=evil)),
                         ("group key", dict(score="p", label="y", by=evil))):
        with pytest.raises(InvalidInputError, match=f"{role} column .*is not in the table"):
            sqlcal.brier(table, **kwargs)


def test_table_names_are_looked_up_not_pasted(tmp_path):
    db = tmp_path / "preds.duckdb"
    con = ibis.duckdb.connect(db)
    con.create_table("preds", _data())
    con.create_table("secret", pd.DataFrame({"a": [1]}))
    con.disconnect()
    before = db.read_bytes()
    for name in ("preds; DROP TABLE secret", "secret\"; DROP TABLE secret; --", "nope",
                 "main.preds; DROP TABLE secret"):
        with pytest.raises(InvalidInputError, match="is not in"):
            sqlcal.brier(str(db), table=name, score="p", label="y")
    assert sqlcal.brier(str(db), table="main.preds", score="p", label="y").n.iloc[0] == 300
    assert db.read_bytes() == before  # opened read-only: not a byte written


def test_database_files_are_opened_read_only(tmp_path):
    db = tmp_path / "preds.duckdb"
    con = ibis.duckdb.connect(db)
    con.create_table("preds", _data())
    con.disconnect()
    sqlcal.brier(str(db), table="preds", score="p", label="y")
    from sqlcal.inputs.sources import _connect

    before = db.read_bytes()
    opened = _connect(str(db))
    with opened.attached(), pytest.raises(Exception, match="(?i)read.only"):
        opened.raw_sql("CREATE TABLE sneaky AS SELECT 1")
    opened.raw_sql("CREATE TABLE sneaky AS SELECT 1")  # between queries the file is not attached
    assert db.read_bytes() == before


# -- odd identifiers and generated conditions -------------------------------------------------

ODD_NAMES = ["my score", "label's", 'the "label"', "wéight ✓", "select", "g;--", "from"]


def _quoted(name: str, dialect: str) -> str:
    return sqlglot.exp.column(name, quoted=True).sql(dialect=dialect)


def test_odd_column_names_give_the_same_numbers(con, upload):
    df = _data(seed=1)
    df["w"] = np.random.default_rng(2).integers(1, 4, len(df)).astype(float)
    score, label, weight, key = "my score", 'the "label"', "wéight ✓", "g;--"
    if con.name == "pyspark":  # Spark column names may not hold ';' or spaces in some places
        score, label, weight, key = "my_scöre", "label's", "wéight", "from"
    odd = df.rename(columns={"p": score, "y": label, "w": weight, "g": key})
    t = upload(odd)
    dialect = {"pyspark": "spark"}.get(con.name, con.name)
    got = sqlcal.ece(t, score=score, label=label, weight=weight, by=key,
                     where=f"{_quoted(score, dialect)} > 0.2")
    want = sqlcal.ece(df[df.p > 0.2], score="p", label="y", weight="w", by="g")
    assert got[key].tolist() == want["g"].tolist()
    np.testing.assert_allclose(got.ece, want.ece, rtol=1e-12)
    np.testing.assert_allclose(got.W, want.W, rtol=1e-12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + " '\"`;-_.()*éß✓", min_size=1,
            max_size=10),
    # sqlcal's own summary and result columns: a key may have any of their names
    st.sampled_from(["p", "y", "w", "n", "W", "s", "k", "bin", "cell", "brier", "chk_p_count",
                     "__key0", "__nan0"])), min_size=3, max_size=3,
    unique_by=lambda s: s.lower()))
def test_generated_identifiers(names):
    score, label, key = names
    df = _data(60, seed=3)
    odd = df[["p", "y", "g"]].rename(columns={"p": score, "y": label, "g": key})
    got = sqlcal.brier(odd, score=score, label=label, by=key,
                       where=f"{_quoted(score, 'duckdb')} >= 0.1")
    part = df[df.p >= 0.1]
    want = part.groupby("g").apply(_brier, include_groups=False)
    assert got[key].tolist() == want.index.tolist()
    # sqlcal's columns follow the key, one named like it with a trailing underscore
    assert list(got.columns) == [key, *(c + "_" if c == key else c for c in (
        "brier", "n", "W", "ci_lower", "ci_upper", "ci_method", "confidence", "weight_kind"))]
    np.testing.assert_allclose(got[f"brier{'_' * (key == 'brier')}"], want.to_numpy(),
                               rtol=1e-12)


def _conditions():
    """(SQL text, numpy mask of the frame) pairs, built together so the oracle is independent."""
    def leaf(df):
        number = st.sampled_from([0, 0.1, 0.25, 0.5, 0.75, 1])
        return st.one_of(
            st.builds(lambda op, v: (f"p {op} {v}", _CMP[op](df.p.to_numpy(), v)),
                      st.sampled_from(list(_CMP)), number),
            st.builds(lambda op, v: (f"k {op} {v}", _CMP[op](df.k.to_numpy(), v)),
                      st.sampled_from(list(_CMP)), st.integers(-1, 10)),
            st.builds(lambda vs: (f"g IN ({', '.join(repr(v) for v in vs)})",
                                  df.g.isin(vs).to_numpy()),
                      st.lists(st.sampled_from(["a", "b", "c", "z"]), min_size=1, max_size=3)),
            st.builds(lambda lo, hi: (f"p BETWEEN {lo} AND {hi}",
                                      (df.p.to_numpy() >= lo) & (df.p.to_numpy() <= hi)),
                      number, number),
            st.builds(lambda m: (f"k % 3 = {m}", df.k.to_numpy() % 3 == m), st.integers(0, 2)),
            st.just(("g LIKE 'a%'", df.g.str.startswith("a").to_numpy())),
        )

    df = _data(200, seed=4)

    def extend(children):
        return st.one_of(
            st.builds(lambda a, b: (f"({a[0]}) AND ({b[0]})", a[1] & b[1]), children, children),
            st.builds(lambda a, b: (f"({a[0]}) OR ({b[0]})", a[1] | b[1]), children, children),
            st.builds(lambda a: (f"NOT ({a[0]})", ~a[1]), children),
        )

    return df, st.recursive(leaf(df), extend, max_leaves=6)


_CMP = {"=": np.equal, "<>": np.not_equal, "<": np.less, "<=": np.less_equal,
        ">": np.greater, ">=": np.greater_equal}
_FRAME, _CONDITION = _conditions()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(condition=_CONDITION)
def test_generated_conditions_filter_like_numpy(condition):
    text, mask = condition
    df = _FRAME
    if not mask.any():
        with pytest.raises(InvalidInputError, match="no rows"):
            sqlcal.brier(df, score="p", label="y", where=text)
        return
    got = sqlcal.brier(df, score="p", label="y", where=text)
    assert int(got.n.iloc[0]) == int(mask.sum()), text
    np.testing.assert_allclose(got.brier.iloc[0], _brier(df[mask]), rtol=1e-12)


def test_condition_grammar():
    t = ibis.table({"p": "float64", "day": "date", "flag": "boolean", "s": "string"}, name="t")
    for ok in ("day >= DATE '2026-11-01'", "day >= '2026-11-01'", "flag", "NOT flag",
               "flag IS TRUE", "s IS NULL", "s IS NOT NULL", "lower(s) LIKE 'a%'",
               "upper(s) ILIKE 'A%'", "coalesce(p, 0) > 0.5", "abs(p - 0.5) < 0.1",
               "CAST(p AS DOUBLE) > 0.5", "-p < 0", "P > 0.5", "length(lower(s)) > 2"):
        assert parse_condition(ok, t).type().is_boolean(), ok
    for bad, says in (("day >= DATE 'not a date'", "cannot read this literal"),
                      ("CAST(p AS BLOB) > 0", "CAST to"), ("s LIKE s", "quoted pattern"),
                      ("p LIKE 'a%'", "text columns"), ("x" * 10_001, "characters long"),
                      ("upper(p) = 'A'", "does not apply"),
                      # Ibis's strip removes tabs and newlines too, SQL's TRIM spaces only
                      ("trim(s) = 'a'", "not allowed")):
        with pytest.raises(ConditionError, match=says):
            parse_condition(bad, t)
    with pytest.raises(ConditionError, match="not int"):
        parse_condition(3, t)
    with pytest.raises(InvalidInputError, match="where= must be"):
        sqlcal.source(_data(), score="p", label="y", where=3)


# -- edge-shaped data -------------------------------------------------------------------------


def test_empty_one_row_and_huge_weight_groups():
    df = _data(50)
    with pytest.raises(InvalidInputError, match="no rows"):
        sqlcal.brier(df, score="p", label="y", where="p > 2")
    one = df.iloc[:1]
    got = sqlcal.brier(one, score="p", label="y")
    assert got.n.iloc[0] == 1 and got.brier.iloc[0] == pytest.approx(_brier(one), rel=1e-15)
    # constant weights cancel in a weighted mean, up to the largest whose squares the variance
    # sums can still hold; past it the rows are refused with the remedy
    huge = df.assign(w=1e130)
    got = sqlcal.brier(huge, score="p", label="y", weight="w")
    np.testing.assert_allclose(got.brier.iloc[0], _brier(df), rtol=1e-12)
    with pytest.raises(InvalidInputError, match="above 1e\\+140.*rescale"):
        sqlcal.brier(df.assign(w=1e300), score="p", label="y", weight="w")
