"""The code passes ruff's rules as pyproject.toml's [tool.ruff] states them (pyflakes,
pycodestyle, import order), the package, its tests, benchmarks and documentation hooks alike."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    try:
        import ruff  # noqa: F401
    except ImportError:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "sqlcal", "tests", "bench",
                          "docs"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
