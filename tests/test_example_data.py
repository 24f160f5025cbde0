"""``sqlcal demo --examples``: the files the documentation's examples read, written safely.

The files hold what the guides say they hold (checked with numpy and pandas on the files, not
with sqlcal), and the writer keeps the output rules: a path holding anything but an earlier
example file is refused before any file is written, and a rerun replaces only its own files.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from sqlcal.cli.commands import main
from sqlcal.cli.example_data import EXAMPLES


def _state(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_demo_writes_the_examples_beside_the_database(tmp_path, capsys):
    db = tmp_path / "demo.duckdb"
    assert main(["demo", str(db), "--rows", "2000", "--examples"]) == 0
    out = capsys.readouterr().out
    for name in EXAMPLES:
        assert (tmp_path / name).is_file() and name in out
    first = _state(tmp_path)
    # a rerun replaces its own files with the same bytes (fixed seeds)
    assert main(["demo", str(db), "--rows", "2000", "--examples"]) == 0
    again = _state(tmp_path)
    assert {k: v for k, v in again.items() if k.endswith(".parquet")} == \
        {k: v for k, v in first.items() if k.endswith(".parquet")}


def test_examples_hold_what_the_guides_say(tmp_path):
    from sqlcal.cli.example_data import write_examples

    write_examples(str(tmp_path))
    preds = pd.read_parquet(tmp_path / "preds.parquet")
    # calibrated outside the planted segment, under-predicting inside it
    inside = (preds.country == "BR") & (preds.device == "ios")
    assert abs(preds.y[~inside].mean() - preds.p[~inside].mean()) < 0.01
    assert preds.y[inside].mean() - preds.p[inside].mean() > 0.08
    clicks = pd.read_parquet(tmp_path / "clicks.parquet")
    # every click kept, one non-click in ten: weighting non-clicks by 10 gives a 1-2% base rate
    w = np.where(clicks.clicked == 1, 1.0, 10.0)
    rate = (w * clicks.clicked).sum() / w.sum()
    assert 0.005 < rate < 0.03
    c3 = clicks[clicks.campaign == "c3"]
    w3 = np.where(c3.clicked == 1, 1.0, 10.0)
    assert (w3 * c3.pctr).sum() / (w3 * c3.clicked).sum() > 1.2  # over-predicted
    wide = pd.read_parquet(tmp_path / "animals.parquet")
    np.testing.assert_allclose(wide[["cat", "dog", "bird"]].sum(axis=1), 1, atol=1e-12)
    assert set(wide.truth) == {"cat", "dog", "bird"} and set(wide.model) == {"v1", "v2"}
    long = pd.read_parquet(tmp_path / "animals_long.parquet")
    assert len(long) == 3 * len(wide) and long.groupby("id").label.sum().eq(1).all()
    merged = long[long.label == 1].merge(wide, on="id")
    assert (merged.cls == merged.truth).all()
    scored = pd.read_parquet(tmp_path / "scored.parquet")
    conversions = pd.read_parquet(tmp_path / "conversions.parquet")
    assert conversions.id.is_unique and conversions.id.isin(scored.id).all()
    assert (conversions.converted == 1).all()


@pytest.mark.parametrize("kind", ["foreign parquet", "text file", "symlink", "directory"])
def test_examples_never_replace_what_they_did_not_write(tmp_path, capsys, kind):
    target = tmp_path / "clicks.parquet"
    if kind == "foreign parquet":
        pd.DataFrame({"x": [1]}).to_parquet(target)
    elif kind == "text file":
        target.write_text("my notes")
    elif kind == "symlink":
        (tmp_path / "elsewhere.txt").write_text("keep")
        os.symlink(tmp_path / "elsewhere.txt", target)
    else:
        target.mkdir()
    before = _state(tmp_path)
    code = main(["demo", str(tmp_path / "demo.duckdb"), "--rows", "2000", "--examples"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "clicks.parquet" in err
    # nothing written: not the demo database, not the other examples
    assert _state(tmp_path) == before
    assert not (tmp_path / "demo.duckdb").exists() and not (tmp_path / "preds.parquet").exists()
