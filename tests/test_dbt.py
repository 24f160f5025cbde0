"""The dbt package sql/dbt/: its files are current, and on DuckDB and PostgreSQL (through
dbt-duckdb and dbt-postgres) its generic test passes a calibrated model and fails a miscalibrated
one for every metric, and its per-group values equal sqlcal.from_summaries on the library's own
statements over the same rows to 1e-9.

The test project (tests/dbt_project) is built once per adapter with one ``dbt build``."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import sqlcal
from sqlcal.export import dbtgen

ROOT = Path(__file__).resolve().parents[1]
PROJECT = Path(__file__).resolve().parent / "dbt_project"
PG = dict(host="localhost", port=5432, user="postgres", password="postgres", dbname="sqlcal_test")
METRICS = ("ece", "mce", "citl", "brier", "log_loss", "spiegelhalter_z", "cutoff_error")
#: the test's metric -> the library's metric, options and result column
LIBRARY = {"ece": ("ece", {}, "ece"), "mce": ("ece", {"norm": "max"}, "mce"),
           "citl": ("calibration_in_the_large", {}, "citl"), "brier": ("brier", {}, "brier"),
           "log_loss": ("log_loss", {}, "log_loss"), "spiegelhalter_z": ("spiegelhalter", {}, "z"),
           "cutoff_error": ("cutoff_error", {"method": "grid"}, "lower_bound")}


def test_generated_files_are_current():
    for name, text in dbtgen.render().items():
        path = ROOT / "sql" / "dbt" / name
        assert path.exists() and path.read_text() == text, \
            f"sql/dbt/{name} is stale: run `python -m sqlcal.export.dbtgen`"


def test_cli_writes_the_package(tmp_path, capsys):
    from sqlcal.cli.commands import main
    assert main(["dbt", str(tmp_path / "pkg")]) == 0
    for name, text in dbtgen.render().items():
        assert (tmp_path / "pkg" / name).read_text() == text
    assert str(tmp_path / "pkg" / "dbt_project.yml") in capsys.readouterr().out


def _dbt() -> str:
    exe = shutil.which("dbt")
    if exe is None:
        if os.environ.get("SQLCAL_STRICT_ENGINES"):  # CI installs the [dbt] extra
            pytest.fail("dbt is not installed (pip install '.[dbt]')")
        print("dbt is not installed: pip install '.[dbt]'")
        pytest.skip("dbt is not installed (pip install '.[dbt]')")
    return exe


def _seed() -> pd.DataFrame:
    """Two segments, fractional weights, tied scores, an overconfident segment b."""
    rng = np.random.default_rng(18)
    n = 400
    score = np.round(rng.uniform(0, 1, n), 2)  # ties
    segment = np.where(np.arange(n) % 3 == 0, "b", "a")
    truth = np.where(segment == "b", score**2, score)
    label = (rng.uniform(0, 1, n) < truth).astype(int)
    weight = np.round(rng.uniform(0.5, 3, n), 3)
    return pd.DataFrame({"segment": segment, "score": score, "label": label, "weight": weight})


def _events() -> pd.DataFrame:
    """Three days of predictions in two segments, whole-number weights, for the store."""
    rng = np.random.default_rng(180)
    n = 600
    score = np.round(rng.uniform(0, 1, n), 3)
    segment = np.where(rng.uniform(size=n) < 0.4, "b", "a")
    label = (rng.uniform(size=n) < np.where(segment == "b", score**2, score)).astype(int)
    t = pd.Timestamp("2026-11-01") + pd.to_timedelta(rng.uniform(0, 3 * 86400, n), unit="s")
    return pd.DataFrame({"segment": segment, "score": score, "label": label,
                         "weight": rng.integers(1, 4, n).astype(float),
                         "t": t.floor("s").strftime("%Y-%m-%d %H:%M:%S")})


def _start(tmp_path: Path, adapter: str) -> tuple[Path, subprocess.Popen]:
    """Copy the test project with the package and a seed, and start its ``dbt build``."""
    dbt = _dbt()
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    (project / "dbt_packages").mkdir()
    (project / "dbt_packages" / "sqlcal").symlink_to(ROOT / "sql" / "dbt")
    (project / "seeds").mkdir()
    _seed().to_csv(project / "seeds" / "predictions.csv", index=False)
    _events().to_csv(project / "seeds" / "events.csv", index=False)
    if adapter == "duckdb":
        target = {"type": "duckdb", "path": str(tmp_path / "dbt.duckdb"), "threads": 2}
    else:
        target = {"type": "postgres", **PG, "schema": _SCHEMA, "threads": 2}
    profile = {"sqlcal_tests": {"target": "test", "outputs": {"test": target}}}
    (project / "profiles.yml").write_text(json.dumps(profile))
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DO_NOT_TRACK": "1"}
    run = subprocess.Popen([dbt, "build", "--profiles-dir", str(project), "--project-dir",
                            str(project)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=env)
    return project, run


_SCHEMA = f"sqlcal_dbt_{os.getpid()}"


def _postgres_reason() -> str | None:
    """Why PostgreSQL cannot be used (None when it can)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        psycopg.connect(**PG, connect_timeout=3).close()
    except psycopg.OperationalError as e:
        if os.environ.get("SQLCAL_STRICT_ENGINES"):
            raise
        return f"PostgreSQL is not reachable: {e}"
    return None


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Both adapters' builds, run at once (dbt's start-up and parse dominate)."""
    started = {"duckdb": None, "postgres": _postgres_reason()}
    for adapter, reason in started.items():
        if reason is None:
            tmp = tmp_path_factory.mktemp(f"dbt_{adapter}")
            started[adapter] = (tmp, *_start(tmp, adapter))
    out = {}
    for adapter, job in started.items():
        if isinstance(job, str):
            out[adapter] = job
            continue
        tmp, project, run = job
        stdout, _ = run.communicate(timeout=300)
        path = project / "target" / "run_results.json"
        assert path.exists(), f"dbt build on {adapter} ran nothing:\n{stdout[-3000:]}"
        results = json.loads(path.read_text())
        if adapter == "duckdb":
            import duckdb
            con = duckdb.connect(str(tmp / "dbt.duckdb"), read_only=True)
            values = con.sql("select * from seed_values").df()
            table = con.sql("select * from predictions").df()
            con.close()
        else:
            import psycopg
            with psycopg.connect(**PG) as con:
                values = _fetch(con, f"select * from {_SCHEMA}.seed_values")
                table = _fetch(con, f"select * from {_SCHEMA}.predictions")
        out[f"{adapter}_dir"] = tmp
        out[adapter] = (adapter, run.returncode, stdout,
                        {r["unique_id"].split(".")[2]: r for r in results["results"]},
                        values, table)
    yield out
    if not isinstance(out["postgres"], str):
        import psycopg
        with psycopg.connect(**PG) as con:
            con.execute(f"drop schema {_SCHEMA} cascade")


def _library(frame: pd.DataFrame, metric: str, weighted: bool) -> pd.DataFrame:
    """The library's value: its own statements on DuckDB over the same rows, finished by
    sqlcal.from_summaries."""
    import duckdb
    name, options, column = LIBRARY[metric]
    options = {**options, **({"bins": 10} if name == "ece" else {}),
               **({"cells": 256} if name == "cutoff_error" else {})}
    kw = dict(score="score", label="label", weight="weight" if weighted else None,
              by=["segment"] if weighted else [])
    con = duckdb.connect()
    con.register("preds", frame)
    sql = sqlcal.summary_sql(name, table="preds", **kw, **options)
    frames = {k: con.sql(text).df() for k, text in sql.items()}
    level = {"confidence": 0.9} if metric in DELTA else {}  # the macro's default level
    out = sqlcal.from_summaries(name, frames, **kw, **options, **level)
    return out.rename(columns={column: "expected"})


#: the metrics whose values the macro gives with the delta method's interval (lower, upper)
DELTA = ("brier", "log_loss", "citl")


@pytest.fixture(params=["duckdb", "postgres"])
def built(request, builds):
    job = builds[request.param]
    if isinstance(job, str):
        pytest.skip(job)
    return job


def _fetch(con, sql):
    cur = con.execute(sql)
    return pd.DataFrame(cur.fetchall(), columns=[d.name for d in cur.description])


def test_calibrated_passes_and_miscalibrated_fails(built):
    adapter, returncode, stdout, results, _, _ = built
    status = {name: r["status"] for name, r in results.items()}
    for node in ("rows", "calibrated", "miscalibrated", "invalid", "seed_values", "predictions",
                 "events", "sqlcal_sum_totals", "sqlcal_sum_cells", "sqlcal_sum_bins",
                 "sqlcal_snapshots", "drift_sum_cells", "drift_snapshots", "drift_path",
                 "drift_alarms"):
        assert status[node] == "success", (node, stdout[-3000:])
    for metric in METRICS:
        assert status[f"calibrated_{metric}"] == "pass", (metric, stdout[-3000:])
        assert status[f"miscalibrated_{metric}"] == "fail", (metric, stdout[-3000:])
    assert status["calibrated_ece_where"] == "pass"
    assert status["miscalibrated_ece_where"] == "fail"
    # one failing row per group: segments a and b
    assert results["miscalibrated_ece"]["failures"] == 2
    assert results["miscalibrated_ece_where"]["failures"] == 1
    # rows the library refuses (a NULL score in group a) fail the test whatever the value
    assert status["invalid_ece"] == "fail" and results["invalid_ece"]["failures"] == 1
    assert returncode != 0 and "Failure in test miscalibrated_ece " in stdout
    # the change detector on a stored stream: the drifting segment alarms, the steady one not
    assert status["drift_change"] == "fail" and results["drift_change"]["failures"] == 1
    assert status["drift_change_steady"] == "pass"


def test_values_equal_the_library(built):
    adapter, _, _, _, values, table = built
    table = table.astype({"score": float, "label": float, "weight": float})
    assert len(table) == 400
    for metric in METRICS:
        for weighted in (True, False):
            got = values[(values["metric"] == metric)
                         & (values["variant"] == ("weighted" if weighted else "unweighted"))]
            want = _library(table, metric, weighted)
            if weighted:
                got = got.sort_values("segment").reset_index(drop=True)
                want = want.sort_values("segment").reset_index(drop=True)
                assert list(got["segment"]) == list(want["segment"]) == ["a", "b"]
            assert len(got) == len(want) >= 1
            np.testing.assert_allclose(got["value"].astype(float), want["expected"],
                                       rtol=1e-9, atol=1e-12, err_msg=f"{adapter} {metric}")
            np.testing.assert_allclose(got["w_total"].astype(float), want["W"], rtol=1e-12)
            if metric in DELTA:  # the interval's ends, as the library gives them
                for end in ("lower", "upper"):
                    np.testing.assert_allclose(got[end].astype(float), want[f"ci_{end}"],
                                               rtol=1e-9, atol=1e-12,
                                               err_msg=f"{adapter} {metric} {end}")
            else:
                assert got["lower"].isna().all() and got["upper"].isna().all(), metric
            if weighted:  # and a brute-force computation on the raw rows
                brute = [_brute(part, metric) for _, part in table.groupby("segment")]
                np.testing.assert_allclose(got["value"].astype(float), brute, rtol=1e-9,
                                           atol=1e-12, err_msg=f"{adapter} {metric} (numpy)")
            if weighted and metric == "brier":  # its interval too (sampling weights: v = w²)
                z = float(stats.norm.isf(0.05))
                for (_, part), lo, hi in zip(table.groupby("segment"), got["lower"],
                                             got["upper"]):
                    p, y, w = (part[c].to_numpy(float) for c in ("score", "label", "weight"))
                    bs = (w * (y - p) ** 2).sum() / w.sum()
                    se = np.sqrt((w * w * ((y - p) ** 2 - bs) ** 2).sum()) / w.sum()
                    np.testing.assert_allclose([float(lo), float(hi)],
                                               [max(bs - z * se, 0), min(bs + z * se, 1)],
                                               rtol=1e-9, err_msg=f"{adapter} brier (numpy)")


def _brute(t: pd.DataFrame, metric: str) -> float:
    """The metric on one group's raw rows in numpy (sampling weights: they are fractional)."""
    p, y, w = (t[c].to_numpy(float) for c in ("score", "label", "weight"))
    W = w.sum()
    if metric in ("ece", "mce"):
        b = np.minimum(np.floor(p * 10), 9).astype(int)
        gap = np.array([(w * (y - p))[b == k].sum() for k in range(10)])
        mass = np.bincount(b, weights=w, minlength=10)
        return (np.abs(gap).sum() / W if metric == "ece"
                else (np.abs(gap[mass > 0]) / mass[mass > 0]).max())
    if metric == "citl":
        return (w * p).sum() / W - (w * y).sum() / W
    if metric == "brier":
        return (w * (y - p) ** 2).sum() / W
    if metric == "log_loss":
        with np.errstate(divide="ignore"):
            terms = np.where(y > 0, -np.log(p), -np.log1p(-p))
        return (w * terms).sum() / W
    if metric == "spiegelhalter_z":
        return ((w * (y - p) * (1 - 2 * p)).sum()
                / np.sqrt((w**2 * (1 - 2 * p) ** 2 * p * (1 - p)).sum()))
    cell = np.minimum(np.floor(p * 256), 255).astype(int)  # cutoff_error's lower bound
    s_end = np.cumsum(np.bincount(cell, weights=w * (y - p), minlength=256))
    estimate = (max(s_end.max(), 0) - min(s_end.min(), 0)) / W
    n_eff = W**2 / (w**2).sum()
    return float(np.clip(estimate - (20 + np.sqrt(2 * np.log(20))) / np.sqrt(n_eff), 0, 1))


class _Adapter:
    """What the summary macros use of dbt's ``adapter``: its identifier quoting."""

    def __init__(self, quote: str):
        self._q = quote

    def quote(self, name: str) -> str:
        return f"{self._q}{name}{self._q}"


@functools.lru_cache
def _macros(quote: str):
    import jinja2
    text = (ROOT / "sql" / "dbt" / "macros" / "summaries.sql").read_text()
    return jinja2.Environment().from_string(text, globals={"adapter": _Adapter(quote)}).module


def _summary_macro(adapter: str, kind: str):
    """The dispatched variant of ``summary_<kind>`` for ``adapter`` (default__ when none), from
    the generated file, rendered with plain Jinja."""
    module = _macros("`" if adapter in ("spark", "bigquery") else '"')
    return (getattr(module, f"{adapter}__summary_{kind}", None)
            or getattr(module, f"default__summary_{kind}"))


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in ("segment", "bin", "cell", "k", "p") if c in frame]
    frame = frame.astype({c: float for c in frame if c not in ("segment",)})
    return frame.sort_values(keys).reset_index(drop=True) if keys else frame


@pytest.mark.parametrize("weighted", [True, False])
def test_summary_macros_equal_the_library_statements_on_duckdb(weighted):
    """Every summary macro, rendered with and without group keys and at a non-default bin or cell
    count, returns on DuckDB what sqlcal.summary_sql's statement returns."""
    import duckdb
    con = duckdb.connect()
    frame = _seed()
    frame.loc[::7, "weight"] = 0.0  # rows the weighted statements leave out
    con.register("preds", frame)
    con.register("predictions", frame)
    kw = dict(table="preds", score="score", label="label",
              weight="weight" if weighted else None)
    cases = {"totals": ({}, "brier", {}), "uniform_bins": ({"bins": 7}, "ece", {"bins": 7}),
             "score_cells": ({"cells": 64}, "cutoff_error", {"method": "grid", "cells": 64}),
             "logit_grid": ({}, "ls_ece", {}), "levels": ({}, "cutoff_error", {})}
    for by in (["segment"], []):
        for kind, (params, metric, options) in cases.items():
            sql = _summary_macro("duckdb", kind)("preds", by, *params.values(), weighted)
            (want,) = sqlcal.summary_sql(metric, **kw, by=by, **options).values()
            got, want = con.sql(sql).df(), con.sql(want).df()
            assert set(want.columns) <= set(got.columns), (kind, by)
            pd.testing.assert_frame_equal(_sorted(got[want.columns]), _sorted(want),
                                          rtol=1e-12, obj=f"{kind} by={by}")
    got = con.sql(_summary_macro("duckdb", "validation")("predictions", ["segment"], True)).df()
    want = con.sql((ROOT / "sql" / "duckdb" / "validation.sql").read_text()).df()
    pd.testing.assert_frame_equal(_sorted(got), _sorted(want))


@pytest.mark.parametrize("adapter", sorted(dbtgen.ADAPTERS))
def test_summary_macros_parse_in_their_dialect(adapter):
    """Each adapter's macros render to SQL that sqlglot parses in that dialect, with no and two
    group keys (the engines themselves run in tests above for DuckDB and PostgreSQL)."""
    import sqlglot
    dialect = {"spark": "databricks"}.get(adapter, adapter)
    for kind, param in [("validation", ()), ("totals", ()), ("uniform_bins", (10,)),
                        ("score_cells", (256,)), ("logit_grid", ()), ("levels", ())]:
        for by in ([], ["a", "b"]):
            for weighted in (True, False):
                sql = _summary_macro(adapter, kind)("sqlcal_rows", by, *param, weighted)
                tree = sqlglot.parse_one(sql, read=dialect)
                names = {c.name for c in tree.find_all(sqlglot.exp.Column)}
                assert set(by) <= names, (adapter, kind, by)
                assert "{" not in sql and "sqlcal_by__" not in sql


@pytest.mark.parametrize("adapter", ["duckdb", "postgres"])
def test_stored_reads_the_store_dbt_wrote(builds, adapter):
    """The store models (sqlcal_sum_totals, _cells, _bins, sqlcal_snapshots) write what
    sqlcal.stored reads: every stored metric equals the library on the rows."""
    import ibis

    from sqlcal.monitor.store import manifest
    if isinstance(builds[adapter], str):
        pytest.skip(builds[adapter])
    path = (str(builds["duckdb_dir"] / "dbt.duckdb") if adapter == "duckdb" else
            ibis.postgres.connect(host=PG["host"], port=PG["port"], user=PG["user"],
                                  password=PG["password"], database=PG["dbname"],
                                  schema=_SCHEMA))
    events = _events().assign(t=lambda d: pd.to_datetime(d["t"]))
    src = sqlcal.stored(path)  # the mature view: as_of is 37 days after the last day
    kw = dict(score="score", label="label", weight="weight", by="segment")
    for name, options, column in [("brier", {}, "brier"), ("log_loss", {}, "log_loss"),
                                  ("calibration_in_the_large", {}, "citl"),
                                  ("spiegelhalter", {}, "z"), ("ece", {}, "ece"),
                                  ("cutoff_error", {"method": "grid"}, "cutoff_error")]:
        function = getattr(sqlcal, name)
        got = function(src, **options).sort_values("segment")
        want = function(events, **kw, **options).sort_values("segment")
        np.testing.assert_allclose(got[column], want[column], rtol=1e-9,
                                   err_msg=f"{adapter} {name}")
        np.testing.assert_allclose(got["W"], want["W"], rtol=1e-12)
    periods = manifest(path)
    assert len(periods) == 3 and periods["version"].tolist() == [1, 1, 1]
    assert periods["integer_weights"].all() and periods["mature"].all()


@pytest.mark.parametrize("adapter", ["duckdb", "postgres"])
def test_change_detector_equals_the_library(builds, adapter):
    """sqlcal.calibration_change's detector, per segment and stored day (drift_path) and its
    alarm (drift_alarms), equals sqlcal.detect on the store dbt wrote to 1e-9; the rate of the
    segment 'drift' is 1.4 times its score from 2026-11-10 on, and it alone alarms, after."""
    import ibis
    if isinstance(builds[adapter], str):
        pytest.skip(builds[adapter])
    if adapter == "duckdb":  # the connection sqlcal keeps for the path (one per process)
        from sqlcal.monitor.store import connect
        store = str(builds["duckdb_dir"] / "dbt.duckdb")
        path, alarms = (connect(store).table(t).to_pandas() for t in ("drift_path",
                                                                       "drift_alarms"))
    else:
        import psycopg
        with psycopg.connect(**PG) as con:
            path, alarms = (_fetch(con, f"select * from {_SCHEMA}.{t}")
                            for t in ("drift_path", "drift_alarms"))
        store = ibis.postgres.connect(host=PG["host"], port=PG["port"], user=PG["user"],
                                      password=PG["password"], database=PG["dbname"],
                                      schema=_SCHEMA)
    found = sqlcal.detect(store, prefix="drift_")
    path["day"] = pd.to_datetime(path["day"]).astype("datetime64[ns]")
    both = path.merge(found.path, on=["segment", "day"], how="outer", suffixes=("", "_lib"),
                      indicator=True)
    assert (both["_merge"] == "both").all() and len(both) == 120  # 60 days, 2 segments
    for column in ("n", "W", "log_e", "log_M"):
        np.testing.assert_allclose(both[column].astype(float), both[f"{column}_lib"],
                                   rtol=1e-9, atol=1e-9, err_msg=f"{adapter} {column}")
    np.testing.assert_allclose(path["threshold"].astype(float), np.log(365 / 0.05), rtol=1e-12)
    assert (path["alarm"].astype(int) == (path["log_M"] >= path["threshold"])).all()
    alarms = alarms.set_index("segment")
    assert alarms["failed"].astype(int).to_dict() == {"drift": 1, "steady": 0}
    assert alarms["problem"].isna().all()
    (_, lib), = found.alarms.iterrows()
    got = alarms.loc["drift"]
    assert lib["segment"] == "drift"
    assert pd.Timestamp(got["alarm_day"]) == lib["alarm_day"]
    assert pd.Timestamp(got["change_day"]) == lib["change_day"]
    np.testing.assert_allclose(float(got["log_M_at_alarm"]), lib["log_M_at_alarm"], rtol=1e-9)
    assert pd.Timestamp("2026-11-10") <= lib["change_day"] <= lib["alarm_day"] \
        <= pd.Timestamp("2026-11-20")
    last = found.path[found.path["day"] == found.path["day"].max()].set_index("segment")
    np.testing.assert_allclose(alarms["log_M"].astype(float), last.loc[alarms.index, "log_M"],
                               rtol=1e-9, atol=1e-9)
