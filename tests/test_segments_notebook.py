"""notebooks/segments.ipynb runs top to bottom and finds, then fixes, its planted segment."""

from __future__ import annotations

import pytest

pytest.importorskip("nbclient")
from tests.test_notebooks import run  # noqa: E402 (after the skip)

CHECKS = """
import json
print(json.dumps({
    "sqlcal_file": sqlcal.__file__,
    "first": [str(v) for v in found[found.explained_by.isna()].iloc[0][
        ["country", "app_version", "significant"]]],
    "fixed": fix.table.segment.tolist(),
    "accepted": bool(fix.summary.accepted.iloc[0]),
    "after_significant": int(after.significant.sum()),
}))
"""


def test_segments_notebook_finds_and_fixes_the_planted_segment(tmp_path):
    _, out = run("segments.ipynb", CHECKS, tmp_path)
    assert out["first"] == ["BR", "7.1", "True"]
    assert out["fixed"] == ['"country" = \'BR\' AND "app_version" = \'7.1\'']
    assert out["accepted"]
    assert out["after_significant"] == 0
