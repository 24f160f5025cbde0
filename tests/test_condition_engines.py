"""A ``where=`` condition means what the engine's own SQL means, or it is refused: the rows sqlcal
selects equal the engine's ``SELECT count(*) ... WHERE <text>`` on DuckDB, PostgreSQL and Spark;
what is not translated exactly (BETWEEN SYMMETRIC, TRY_CAST, a type or an operator whose meaning
differs) is refused with a message naming it; nesting and width never overflow the stack."""

from __future__ import annotations

import datetime as dt

import ibis
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sqlcal
from sqlcal.inputs.condition import MAX_DEPTH, ConditionError, parse_condition


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    n = 400
    words = ["abc", "Abc", " abc ", "\tabc", "a%b", "a\\b", "it's", "xyz", "12", "-3", None]
    return pd.DataFrame({
        "p": np.round(rng.random(n), 3),
        "y": rng.integers(0, 2, n),
        "k": rng.integers(-6, 7, n),
        "s": [words[i] for i in rng.integers(0, len(words), n)],
        "d": [dt.date(2026, 11, 1) + dt.timedelta(days=int(i)) for i in rng.integers(0, 9, n)],
    })


SAME, REFUSED, EITHER = "same", "refused", "same or refused"
#: (condition, what sqlcal must do): SAME accept it and select the engine's rows; REFUSED refuse
#: it; EITHER one of the two (a construct whose meaning differs between engines)
CONDITIONS = [
    ("p BETWEEN 0.2 AND 0.6", SAME),
    ("p BETWEEN 0.6 AND 0.2", SAME),
    ("p NOT BETWEEN 0.2 AND 0.6", SAME),
    ("p BETWEEN SYMMETRIC 0.6 AND 0.2", REFUSED),
    ("p NOT BETWEEN SYMMETRIC 0.6 AND 0.2", REFUSED),
    ("TRY_CAST(s AS INT) > 1", REFUSED),
    ("s LIKE 'a!%%' ESCAPE '!'", REFUSED),
    ("CAST(k AS FLOAT) > 1.5", EITHER),
    ("CAST(k AS DOUBLE) / 4 > 0.7", EITHER),
    ("CAST(p AS DECIMAL(10, 1)) = 0.5", EITHER),
    ("CAST(s AS CHAR) = 'a'", EITHER),
    ("CAST(s AS VARCHAR) = 'abc'", EITHER),
    ("k / 4 = 1", EITHER),
    ("1 / (k - 1) > 0.3", EITHER),  # a division by zero at k = 1
    ("k % 4 = -1", SAME),
    ("TRIM(s) = 'abc'", EITHER),
    ("LENGTH(s) > 3", SAME),
    ("LOWER(s) LIKE 'a%'", SAME),
    ("UPPER(s) = 'ABC'", SAME),
    ("s LIKE 'a%'", SAME),
    ("s ILIKE 'a%'", SAME),
    ("s IS NULL", SAME),
    ("s IS NOT NULL AND NOT s = 'abc'", SAME),
    ("s IN ('abc', 'xyz', NULL)", SAME),
    ("s NOT IN ('abc', 'xyz')", SAME),
    ("s = 'it''s'", EITHER),  # Spark joins two adjacent literals, 'it' and 's'
    ("s = 'a\\b'", SAME),  # a backslash: an escape in Spark's strings, a character elsewhere
    ("s = 'a\\\\b'", SAME),
    ("COALESCE(s, 'none') = 'none'", SAME),
    ("d >= DATE '2026-11-05'", SAME),
    ("d BETWEEN DATE '2026-11-02' AND DATE '2026-11-04'", SAME),
    ("ABS(k) >= 3 AND -k < 2", SAME),
    ("FLOOR(p * 10) = 3 OR CEIL(p * 10) = 9", SAME),
    ("NOT (p > 0.5 AND k > 0) OR s IS NULL", SAME),
    ("k * 2 + 1 > p * 10 - 3", SAME),
    (" OR ".join(f"k = {i}" for i in range(-400, 400)), SAME),  # wide: 800 terms
    ("(" * 15 + "p > 0.5" + ")" * 15, SAME),
    ("(" * 60 + "p > 0.5" + ")" * 60, REFUSED),  # deep: the parser's recursion is refused
    ("NOT " * 60 + "p > 0.5", REFUSED),
]


def _engine_count(con, name: str, text: str) -> int | None:
    """The engine's own count of the rows ``text`` selects (None when the engine refuses it)."""
    sql = f"SELECT count(*) FROM {name} WHERE {text}"
    try:
        if con.name == "duckdb":
            return int(con.con.execute(sql).fetchone()[0])
        if con.name == "postgres":
            with con.con.cursor() as cursor:
                return int(cursor.execute(sql).fetchone()[0])
        return int(con._session.sql(sql).collect()[0][0])
    except Exception as e:  # the engine's own error: the text is not SQL it accepts
        if con.name == "postgres":
            con.con.rollback()
        return None if "RecursionError" not in type(e).__name__ else -1


def test_conditions_mean_what_the_engine_means(con, upload):
    df = _frame()
    t = upload(df)
    name = t.get_name()
    wrong = []
    for text, expected in CONDITIONS:
        engine = _engine_count(con, name, text)
        try:
            src = sqlcal.source(t, score="p", label="y", where=text)
            got = int(src.rows.count().to_pyarrow().as_py())
        except ConditionError as e:
            got = f"refused: {e}"
        except Exception as e:  # the engine failed on what sqlcal sent it
            got = e
        shown = text if len(text) < 80 else text[:77] + "..."
        if isinstance(got, Exception):
            if engine is not None:  # (where the engine fails on the text too, it may fail here)
                wrong.append((shown, f"{type(got).__name__}: {str(got)[:150]}", engine, "error"))
        elif isinstance(got, str):
            if expected == SAME:
                wrong.append((shown, "refused", engine, got[:200]))
        elif expected == REFUSED:
            wrong.append((shown, got, engine, "accepted"))
        elif engine is not None and got != engine:
            wrong.append((shown, got, engine, "differs"))
        # (where the engine refuses the text, sqlcal may read it as sqlglot reads the dialect:
        # PostgreSQL's DOUBLE as DOUBLE PRECISION; no number of the engine's to differ from)
    assert not wrong, "\n".join(map(str, wrong))


def test_refusals_name_the_construct():
    t = ibis.memtable(_frame())
    for text, says in (("p BETWEEN SYMMETRIC 0.6 AND 0.2", "SYMMETRIC"),
                       ("TRY_CAST(s AS INT) > 1", "TRY_CAST"),
                       ("s LIKE 'a!%%' ESCAPE '!'", "ESCAPE"),
                       ("(" * 60 + "p > 0.5" + ")" * 60, f"at most {MAX_DEPTH}"),
                       ("NOT " * 60 + "p > 0.5", f"at most {MAX_DEPTH}")):
        with pytest.raises(ConditionError, match=says):
            parse_condition(text, t)


def test_summary_sql_reads_the_condition_in_its_dialect():
    # a backslash escapes in BigQuery's strings and Spark's, not in DuckDB's or PostgreSQL's
    kw = dict(table="t", score="p", label="y", where="s = 'a\\nb'", schema={"s": "string"})
    duck = "".join(sqlcal.summary_sql("brier", dialect="duckdb", **kw).values())
    assert "'a\\nb'" in duck
    big = "".join(sqlcal.summary_sql("brier", dialect="bigquery", **kw).values())
    assert "'a\\nb'" in big  # the newline the text means, written back in BigQuery's syntax
    assert "'a\\\\nb'" not in big
    with pytest.raises(ConditionError, match="SYMMETRIC"):
        sqlcal.summary_sql("brier", dialect="postgres", table="t", score="p", label="y",
                           where="p BETWEEN SYMMETRIC 0.6 AND 0.2")


# -- generated nesting and width: the documented error or a condition, nothing else ---------


def _tree():
    leaf = st.sampled_from(["p > 0.5", "k = 1", "s IS NULL", "s LIKE 'a%'", "TRUE"])

    def extend(children):
        return st.one_of(
            st.builds(lambda a: f"({a})", children),
            st.builds(lambda a, n: "NOT " * n + a, children, st.integers(1, 300)),
            st.builds(lambda xs: " OR ".join(xs), st.lists(children, min_size=2, max_size=40)),
            st.builds(lambda xs: " AND ".join(f"({x})" for x in xs),
                      st.lists(children, min_size=2, max_size=40)),
        )

    return st.recursive(leaf, extend, max_leaves=400)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_tree(), wrap=st.integers(0, 3000))
@example(text=" OR ".join(f"k = {i}" for i in range(900)), wrap=0)
@example(text=" AND ".join(f"k <> {i}" for i in range(1100)), wrap=0)
@example(text="p > 0.5", wrap=2000)
@example(text="NOT " * 1500 + "p > 0.5", wrap=0)
def test_generated_nesting_and_width_give_a_condition_or_the_documented_error(text, wrap):
    # (Hypothesis raises the recursion limit while it runs: the shapes go far deeper than the
    # 42 parentheses and 330 OR terms that overflowed the default limit)
    t = ibis.memtable(_frame())
    text = "(" * wrap + text + ")" * wrap
    try:
        value = parse_condition(text, t)
    except ConditionError:
        return
    ibis.to_sql(t.filter(value))  # and Ibis compiles it
