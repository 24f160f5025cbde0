"""sqlcal reads its inputs and nothing else: a DuckDB file is held only while a query runs (an ETL
job in another process may replace it or write to it between two measurements, and the next
measurement sees the new rows), and a PostgreSQL session sqlcal opens from a URL refuses writes
(every transaction read-only), the summary store's writer session excepted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqlcal
from tests.conftest import POSTGRES_URL, calibration_data, engine_missing

ROOT = Path(__file__).resolve().parents[1]

#: a process that measures the file on each line of its stdin, until "quit": the brute-force
#: numbers it prints are compared with numpy on the rows the test wrote
MEASURER = textwrap.dedent("""
    import json, sys
    import sqlcal
    path = sys.argv[1]
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        out = sqlcal.calibration_in_the_large(path, table="preds", score="p", label="y")
        ece = sqlcal.ece(sqlcal.source(path, table="preds", score="p", label="y"), bins=10)
        print(json.dumps({"n": int(out["n"][0]), "mean_score": float(out["mean_score"][0]),
                          "ece": float(ece["ece"][0])}), flush=True)
""")


def _ece(df: pd.DataFrame, bins: int = 10) -> float:
    b = np.minimum(np.floor(df.p.to_numpy() * bins), bins - 1)
    gaps = pd.DataFrame({"b": b, "r": df.y - df.p}).groupby("b")["r"].sum().abs()
    return float(gaps.sum() / len(df))


def _write(path: Path, df: pd.DataFrame) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE preds AS SELECT * FROM df")
    con.close()


def test_another_process_replaces_and_writes_the_file_between_measurements(tmp_path):
    path = tmp_path / "preds.duckdb"
    first = calibration_data(400, seed=1)[["p", "y"]]
    _write(path, first)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    measurer = subprocess.Popen([sys.executable, "-c", MEASURER, str(path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)

    def measure() -> dict:
        import json

        measurer.stdin.write("go\n")
        measurer.stdin.flush()
        line = measurer.stdout.readline()
        assert line, measurer.stderr.read()
        return json.loads(line)

    def check(got: dict, df: pd.DataFrame) -> None:
        assert got["n"] == len(df)
        np.testing.assert_allclose(got["mean_score"], df.p.mean(), rtol=1e-12)
        np.testing.assert_allclose(got["ece"], _ece(df), rtol=1e-9)

    try:
        check(measure(), first)
        # a writer in this process while the measurer waits: the file takes no lock of sqlcal's
        more = calibration_data(100, seed=2)[["p", "y"]]
        writer = duckdb.connect(str(path))
        writer.execute("INSERT INTO preds SELECT * FROM more")
        writer.close()
        check(measure(), pd.concat([first, more]))
        # an ETL job swaps the file for a new one, then writes to it
        second = calibration_data(300, seed=5)[["p", "y"]]
        _write(tmp_path / "next.duckdb", second)
        os.replace(tmp_path / "next.duckdb", path)
        check(measure(), second)
        writer = duckdb.connect(str(path))
        writer.execute("DELETE FROM preds WHERE p > 0.5")
        writer.close()
        check(measure(), second[second.p <= 0.5])
    finally:
        measurer.communicate("quit\n", timeout=60)


def test_a_source_reads_the_file_as_it_is_at_each_query(tmp_path):
    # in this process too: a source built before a swap gives the new file's numbers after it
    path = tmp_path / "preds.duckdb"
    _write(path, calibration_data(200, seed=3)[["p", "y"]])
    before = sqlcal.brier(str(path), table="preds", score="p", label="y")
    second = calibration_data(300, seed=4)[["p", "y"]]
    _write(tmp_path / "next.duckdb", second)
    os.replace(tmp_path / "next.duckdb", path)
    after = sqlcal.brier(str(path), table="preds", score="p", label="y")
    assert int(before["n"][0]) == 200 and int(after["n"][0]) == 300
    np.testing.assert_allclose(after["brier"][0], np.mean((second.p - second.y) ** 2),
                               rtol=1e-12)
    writer = duckdb.connect(str(path))  # no lock held by this process's read-only session
    writer.execute("DELETE FROM preds")
    writer.close()
