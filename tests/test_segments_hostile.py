"""Hostile and careless input to sqlcal.segments, segment_fix and ``sqlcal segments``: output
paths refused before any search, any group key or feature name, NULL kept apart from every
value, and the lattice's cost checked against the budget before any level runs."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sqlcal
from sqlcal.cli.commands import main
from sqlcal.errors import InvalidInputError

audit = importlib.import_module("sqlcal.audit.discovery")
COLUMNS = ["--score", "p", "--label", "y"]


def _planted(n=20000, seed=4) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"country": rng.choice(["BR", "US", "DE"], n),
                       "device": rng.choice(["ios", "android"], n), "p": rng.beta(2, 6, n)})
    eta = np.log(df.p / (1 - df.p)) + 0.6 * (df.country.eq("BR") & df.device.eq("ios"))
    df["y"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    return df


def _files(folder: Path) -> dict:
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[str(path.relative_to(folder))] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _planted().to_parquet("d.parquet")
    Path("notes.txt").write_text("my notes\n")
    os.mkdir("folder")
    os.symlink("notes.txt", "link.json")
    return tmp_path


@pytest.mark.parametrize("path, words", [
    ("notes.txt", ["notes.txt", "not a previous sqlcal json output"]),
    ("d.parquet", ["d.parquet", "reads"]),
    ("link.json", ["link.json", "symlink"]),
    ("folder", ["folder", "directory"]),
])
def test_cli_refuses_the_json_path_before_any_search(ws, capsys, monkeypatch, path, words):
    """``sqlcal segments --json PATH`` checks PATH with the one output writer's rules before
    the search runs (a search of minutes, then a refusal, was the old order)."""
    def no_search(*args, **kwargs):
        raise AssertionError("the search ran before the output path was checked")

    monkeypatch.setattr(audit, "_search", no_search)
    before = _files(ws)
    code = main(["segments", "d.parquet", *COLUMNS, "--features", "country,device",
                 "--fix", "--json", path])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("sqlcal: error: ")
    for word in words:
        assert word in err
    assert _files(ws) == before


# -- NULL, the pooled bucket and every value are kept apart ---------------------------------------

VALUES = st.one_of(
    st.sampled_from(["__null__", "__other__", "", "null", "other", "=", "=a", "O'Brien",
                     "a\"b", "NULL", "None", "nan", "ünï", "x y"]),
    # NUL is refused (test_a_kept_value_with_nul_is_refused_by_name)
    st.text(st.characters(blacklist_characters="\x00"), max_size=6))


def test_a_kept_value_with_nul_is_refused_by_name():
    """A value holding NUL with a segment's support would become a SQL string literal, which
    DuckDB's parser and PostgreSQL's text cannot hold: refused naming the feature; the same
    value below the support is pooled and never written, so the search runs."""
    rng = np.random.default_rng(3)
    n = 400
    f = np.array(["a", "b", "x\x00y"], dtype=object)[rng.choice(3, n, p=[0.45, 0.45, 0.10])]
    df = pd.DataFrame({"f": f, "p": rng.uniform(0.1, 0.9, n)})
    df["y"] = (rng.uniform(size=n) < df.p).astype(int)
    with pytest.raises(InvalidInputError, match="feature 'f' has 1 value.*NUL"):
        sqlcal.segments(df, score="p", label="y", features=["f"], min_support=10,
                        min_expected=0.0, mode="full", fdr="none")
    nul_rows = int((df.f == "x\x00y").sum())
    out = sqlcal.segments(df, score="p", label="y", features=["f"], min_support=nul_rows + 1,
                          min_expected=0.0, mode="full", fdr="none", top_k=None)
    assert set(out.loc[out.depth == 1, "n"]) >= {int((df.f == "a").sum())}


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=st.lists(st.one_of(st.none(), VALUES), min_size=2, max_size=6, unique=True),
       sizes=st.lists(st.integers(1, 60), min_size=6, max_size=6), seed=st.integers(0, 2**16))
def test_null_the_pooled_bucket_and_every_value_are_segments_of_their_own(values, sizes, seed):
    """Each distinct value of a feature (NULL, ``"__null__"``, ``"__other__"``, ``""``, unicode,
    quotes) is its own segment, or falls in the pooled bucket when its weight is below
    ``min_support``; never merged with another. Oracle: pandas on the raw rows with NULL apart
    from every string (``dropna=False``); the segment's SQL, run by DuckDB on the rows, selects
    exactly its rows."""
    import duckdb

    rng = np.random.default_rng(seed)
    f = np.array([v for v, k in zip(values, sizes) for _ in range(k)], dtype=object)
    n = len(f)
    df = pd.DataFrame({"f": f, "g": rng.choice(["x", "y"], n), "p": rng.uniform(0.1, 0.9, n)})
    df["y"] = (rng.uniform(size=n) < df.p).astype(int)
    support = 20.0
    out = sqlcal.segments(df, score="p", label="y", features=["f", "g"], max_depth=2,
                          min_support=support, min_expected=0.0, mode="full", fdr="none",
                          top_k=None)
    # the oracle: each value (NULL one of them) with its weight; those below the support pooled
    counts = {v if isinstance(v, str) else None: int(c)  # pandas gives NULL as NaN
              for v, c in df.groupby("f", dropna=False, sort=False).size().items()}
    kept = [v for v, c in counts.items() if c >= support]
    pooled = [v for v, c in counts.items() if c < support]
    depth1 = out[(out.depth == 1) & out.f.notna()]
    expected = {("value", v): c for v, c in counts.items() if c >= support}
    if kept and pooled and sum(counts[v] for v in pooled) >= support:  # eligible
        expected[("other", None)] = int(sum(counts[v] for v in pooled))
    got = {}
    for _, row in depth1.iterrows():
        special = json.loads(row.special_values) if isinstance(row.special_values, str) else {}
        kind = special.get("f")
        key = ("value", None) if kind == "null" else ("other", None) if kind == "other" else \
            ("value", row.f)
        assert key not in got  # one segment per value: nothing merged
        got[key] = int(row.n)
    assert got == {k: int(c) for k, c in expected.items()}
    # every segment's SQL selects exactly its rows, with its residual
    frame = df  # noqa: F841 (read by name by DuckDB's replacement scan below)
    for _, row in out[out.segment.notna()].iterrows():
        sel = duckdb.sql(f"SELECT count(*) AS n, sum(y - p) AS r FROM frame "
                         f"WHERE {row.segment}").df()
        assert int(sel.n[0]) == row.n, row.segment
        assert float(sel.r[0]) == pytest.approx(row.residual, rel=1e-9, abs=1e-9)


def test_fix_of_a_value_named_like_null_shifts_those_rows_not_the_null_ones():
    """Rows whose feature holds the string ``"__null__"`` are miscalibrated, the NULL rows are
    not: the significant segment and the fix select the string's rows (``f = '__null__'``), and
    the exported SQL leaves every NULL row's score as it was."""
    import duckdb

    rng = np.random.default_rng(3)
    n = 20000
    df = pd.DataFrame({"f": rng.choice(np.array(["__null__", None, "a", "b"], dtype=object), n),
                       "p": rng.uniform(0.1, 0.6, n)})
    df["y"] = (rng.uniform(size=n) < df.p + np.where(df.f.eq("__null__"), 0.15, 0.0)).astype(int)
    out = sqlcal.segments(df, score="p", label="y", features=["f"], min_support=100.0,
                          mode="full")
    significant = out[out.significant]
    assert significant.segment.tolist() == ["\"f\" = '__null__'"]
    assert significant.special_values.isna().all()
    null_row = out[out.segment == '"f" IS NULL'].iloc[0]
    assert json.loads(null_row.special_values) == {"f": "null"}
    assert null_row.n == df.f.isna().sum()
    fix = sqlcal.segment_fix(df, score="p", label="y", features=["f"], min_support=100.0)
    assert fix.table.segment.tolist() == ["\"f\" = '__null__'"]
    fixed = duckdb.sql(f"SELECT f, p, {fix.sql('p')} AS q FROM df").df()
    changed = fixed.q.to_numpy() != fixed.p.to_numpy()
    np.testing.assert_array_equal(changed, fixed.f.eq("__null__").to_numpy())
    # the result itself, passed back as segments=, fits the same rows
    again = sqlcal.segment_fix(df, score="p", label="y", features=["f"], segments=out)
    assert again.table.segment.tolist() == ["\"f\" = '__null__'"]


# -- any group key or feature name --------------------------------------------------------------


def _named(column: str, users) -> str:
    """The documented rule: sqlcal's column takes a trailing underscore while a group key or a
    feature of the user's has its name."""
    while column in users:
        column += "_"
    return column


def _grouped(key: str, features: list[str], n=12000, seed=5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({key: rng.choice(["web", "app"], n),
                       features[0]: rng.choice(["a", "b", "c"], n),
                       features[1]: rng.choice(["x", "y"], n), "score": rng.beta(2, 5, n)})
    star = df[key].eq("web") & df[features[0]].eq("a") & df[features[1]].eq("x")
    eta = np.log(df.score / (1 - df.score)) + 0.8 * star
    df["label"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    return df


@pytest.mark.parametrize("key, features", [
    ("segment", ["country", "device"]),          # the demo table's own column
    ("n", ["z", "harm"]),                         # keys and features named like result columns
    ("sqlcal_c0", ["sqlcal_c1", "sqlcal_fold"]),  # named like the search's internal columns
    ("pattern", ["theta", "searched"]),           # ... and the fix's
    ("segment", ["segment_", "special_values"]),  # the renamed column itself taken
])
def test_any_key_or_feature_name_gives_each_group_its_own_segments(key, features):
    """segments(by=key) equals segments on each group's rows alone, whatever the names of the
    key and of the features; the key comes first under its own name, and each column sqlcal adds
    whose name a key or feature holds takes trailing underscores."""
    df = _grouped(key, features)
    kw = dict(score="score", label="label", features=features, max_depth=2, min_support=200.0,
              mode="full", top_k=None)
    out = sqlcal.segments(df, by=key, **kw)
    users = {key, *features}
    assert out.columns[0] == key
    assert set(out[key]) == {"web", "app"}
    for c in ("segment", "n", "z", "harm", "searched", "special_values", "significant"):
        assert _named(c, users) in out.columns
    for value in ("web", "app"):
        alone = sqlcal.segments(df[df[key] == value].drop(columns=key), **kw)
        got = out[out[key] == value]
        assert len(got) == len(alone)
        for f in features:  # the user's columns under their own names
            assert got[f].tolist() == alone[f].tolist(), f
        for c in ("segment", "depth", "n", "W", "residual", "z", "q_value", "significant",
                  "explained_by"):  # sqlcal's, each under its name in that result
            mine, theirs = got[_named(c, users)], alone[_named(c, set(features))]
            if c in ("W", "residual", "z", "q_value"):
                np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-12)
            else:
                assert mine.tolist() == theirs.tolist(), c


@pytest.mark.parametrize("key, features", [("segment", ["country", "device"]),
                                           ("theta", ["pattern", "accepted"])])
def test_segment_fix_by_any_key_equals_the_fix_of_each_group_alone(key, features):
    """The fix's SQL, run by DuckDB on the user's table (its key column named like a result or
    internal column), gives each row the score the fix of its group's rows alone gives."""
    import duckdb

    df = _grouped(key, features, n=30000)
    kw = dict(score="score", label="label", features=features, max_depth=2, min_support=300.0)
    fix = sqlcal.segment_fix(df, by=key, **kw)
    users = {key, *features}
    assert fix.table.columns[0] == fix.summary.columns[0] == key
    assert _named("theta", users) in fix.table and _named("accepted", users) in fix.summary
    assert set(fix.table[key]) == {"web"}  # only the planted group has a segment
    got = duckdb.sql(f"SELECT {fix.sql('score')} AS q FROM df").df().q.to_numpy()
    expect = df.score.to_numpy().copy()
    for value in ("web", "app"):
        rows = (df[key] == value).to_numpy()
        part = df[rows].drop(columns=key)
        alone = sqlcal.segment_fix(part, **kw)
        expect[rows] = duckdb.sql(f"SELECT {alone.sql('score')} AS q FROM part").df().q
    np.testing.assert_allclose(got, expect, rtol=1e-9)


def test_cli_segments_by_a_key_named_segment(ws, capsys, tmp_path):
    """``sqlcal segments --by segment`` (the demo's column) runs, and its JSON holds the key
    under its name and the condition under ``segment_``."""
    _grouped("segment", ["country", "device"], n=20000).to_parquet("g.parquet")
    code = main(["segments", "g.parquet", "--score", "score", "--label", "label", "--by",
                 "segment", "--features", "country,device", "--min-support", "300", "--fix",
                 "--json", "out.json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(Path("out.json").read_text())
    first = next(r for r in doc["segments"] if r["segment"] == "web")  # keys sort first
    assert first["significant"] and first["segment_"] == (
        "\"country\" = 'a' AND \"device\" = 'x'")
    assert doc["fix"]["table"][0]["segment"] == "web"
    assert doc["fix"]["sql"] in out


def test_report_segments_section_by_a_key_named_segment(tmp_path):
    import jsonschema

    from sqlcal.reporting import html, scheduled

    path = tmp_path / "g.parquet"
    _grouped("segment", ["country", "device"], n=20000).to_parquet(path)
    config = scheduled.validate_config({
        "source": {"data": str(path), "score": "score", "label": "label", "by": ["segment"]},
        "metrics": {"ece": {}},
        "segments": {"features": ["country", "device"], "min_support": 300.0}})
    run = scheduled.run_report(config, diagrams=False, progress=False)
    doc = scheduled.to_document(run)
    jsonschema.validate(doc, scheduled.json_schema())
    first = next(r for r in doc["segments"] if r["segment"] == "web")  # keys sort first
    assert first["significant"]
    assert first["segment_"] == "\"country\" = 'a' AND \"device\" = 'x'"
    assert first["searched"]["mode"] == "split"
    page = html.render(run)
    # the segment's condition, escaped (markupsafe's entities for the quotes)
    assert "&#34;country&#34; = &#39;a&#39; AND &#34;device&#34; = &#39;x&#39;" in page


# -- the lattice's cost, checked against the budget before any deeper level runs -----------------


def _wide(n=20000, k=12, card=20, seed=9) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({f"f{j}": rng.integers(0, card, n) for j in range(k)})
    df["p"] = rng.beta(2, 8, n)
    df["y"] = (rng.uniform(size=n) < df.p).astype(int)
    return df


def test_full_mode_refuses_a_lattice_over_the_budget_before_any_deeper_level(monkeypatch):
    """min_support=10 on 20,000 rows of 12 features of 20 values: up to C(12, 3)·20^3 = 1.76
    million depth-3 candidates, about 2.4 GiB of summaries. Refused after the level-1 counts,
    before any deeper statement, naming min_support, max_depth and values that fit; the
    suggested min_support then runs."""
    import re

    from sqlcal.options import BudgetError

    df = _wide()
    features = [f"f{j}" for j in range(12)]
    fetched = []
    real = audit._fetch_nodes
    monkeypatch.setattr(audit, "_fetch_nodes",
                        lambda *a, **k: fetched.append(1) or real(*a, **k))
    for call in (sqlcal.segments, sqlcal.multicalibration):
        kw = dict(mode="full") if call is sqlcal.segments else {}
        with pytest.raises(BudgetError) as e:
            call(df, score="p", label="y", features=features, max_depth=3, min_support=10.0,
                 **kw)
        assert not fetched  # no level past the first ran
        text = str(e.value)
        for word in ("min_support=10", "max_depth=3", "level 3", "GiB", "budget(bytes="):
            assert word in text, text
    suggested = float(re.search(r"or min_support=([0-9.e+]+) would fit", text).group(1))
    assert "max_depth=2" in text
    out = sqlcal.segments(df, score="p", label="y", features=features, max_depth=3,
                          min_support=suggested, mode="full")
    levels = json.loads(out.searched.iloc[0])["levels"]
    assert all(lv.get("bound", 0) * 1400 < 2**30 for lv in levels)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), support=st.sampled_from([5.0, 20.0, 60.0]),
       cards=st.lists(st.integers(2, 6), min_size=3, max_size=4))
def test_the_budget_bound_holds_every_level_candidates(seed, support, cards):
    """The bound the budget check uses (from the level-1 counts) is at least the candidates
    each level of a full search generates, with two groups (their candidates summed)."""
    rng = np.random.default_rng(seed)
    n = 600
    df = pd.DataFrame({f"f{j}": rng.integers(0, c, n) for j, c in enumerate(cards)})
    df["g"] = rng.choice(["u", "v"], n)
    df["p"] = rng.uniform(0.1, 0.9, n)
    df["y"] = (rng.uniform(size=n) < df.p).astype(int)
    out = sqlcal.segments(df, score="p", label="y", by="g",
                          features=list(df.columns[:len(cards)]), max_depth=len(cards),
                          min_support=support, min_expected=0.0, mode="full", top_k=None)
    levels = json.loads(out.searched.iloc[0])["levels"]
    total = {}
    for text in out.drop_duplicates("g").searched:
        for lv in json.loads(text)["levels"]:
            total[lv["depth"]] = total.get(lv["depth"], 0) + lv["candidates"]
    for lv in levels[1:]:
        assert total[lv["depth"]] <= lv["bound"], (lv, total)


def test_split_mode_caps_a_level_to_the_budget():
    """In split mode a level whose candidates' summaries would exceed the budget keeps those
    of largest bound (the search's own rule), and says so in ``searched``."""
    df = _wide(n=6000, k=6, card=8)
    features = [f"f{j}" for j in range(6)]
    with sqlcal.options.budget(bytes=300 * audit._candidate_bytes(2, 1)):
        out = sqlcal.segments(df, score="p", label="y", features=features, max_depth=2,
                              min_support=10.0)
    level2 = json.loads(out.searched.iloc[0])["levels"][1]
    assert level2["cap"] == 300 and level2["capped"] > 0
    assert level2["candidates"] <= 300 < level2["candidates"] + level2["capped"]
    assert level2["evaluated"] <= level2["cap"]
