"""Hostile and careless input to sqlcal.segments, segment_fix and ``sqlcal segments``: output
paths refused before any search, any group key or feature name, NULL kept apart from every
value, and the lattice's cost checked against the budget before any level runs."""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sqlcal.cli import main

audit = importlib.import_module("sqlcal.segments_audit")
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
