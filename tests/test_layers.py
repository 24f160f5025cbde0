"""The package's layers (DESIGN.md "Layers") hold: import-linter's contracts in pyproject.toml pass,
and they do catch each planted violation (an upward import, a cycle, a family reading another,
matplotlib or the reductions in the detector, Ibis reached from the declarations, Ibis, sqlglot or
the reductions in the summary store's modules) and a module left out of the layers; private names
stay in their module; a package attribute named after a module is that module."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sqlcal
from sqlcal import options

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sqlcal"


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``lint-imports`` (import-linter, in the ``test`` extra) on the contracts of
    ``cwd/pyproject.toml``, with this interpreter."""
    try:
        import importlinter  # noqa: F401
    except ImportError:
        pytest.fail("import-linter is not installed: pip install -e '.[test]'")
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    code = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache", "--no-logo"], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken", run.stdout), run.stdout


#: a fault planted in a copy of the package -> what lint-imports must say about it
PLANTED = {
    # an upward import (a metric reading the report) and a cycle
    ("metrics/scores.py", "from sqlcal.reporting import report_table"):
        "sqlcal.metrics.scores -> sqlcal.reporting.report_table",
    ("query/reductions.py", "from sqlcal.cli import commands"):
        "sqlcal.query.reductions -> sqlcal.cli.commands",
    # one metric family reading another's internals
    ("metrics/binned.py", "from sqlcal.metrics import tce"):
        "sqlcal.metrics.binned is not allowed to import sqlcal.metrics.tce",
    # matplotlib below the plots, in the detector
    ("monitor/detector.py", "import matplotlib"):
        "sqlcal.monitor.detector -> matplotlib",
    # the reductions in the detector, and Ibis reached from the declarations through a module
    # that imports it (an indirect import)
    ("monitor/detector.py", "from sqlcal.query import reductions"):
        "sqlcal.monitor.detector is not allowed to import sqlcal.query.reductions",
    ("query/declared.py", "from sqlcal.inputs import sources"):
        "sqlcal.query.declared is not allowed to import ibis",
    # a query built or run outside the query layer: Ibis, sqlglot or the reductions in the
    # summary store's modules
    ("monitor/store.py", "import ibis"):
        "sqlcal.monitor.store -> ibis",
    ("monitor/stored.py", "import sqlglot"):
        "sqlcal.monitor.stored -> sqlglot",
    ("monitor/store.py", "from sqlcal.query import reductions"):
        "sqlcal.monitor.store -> sqlcal.query.reductions",
}


@pytest.mark.parametrize("where, line", list(PLANTED))
def test_the_contracts_catch_a_planted_violation(tmp_path, where, line):
    # a copy of the package with one fault: the contracts must name it, and the copy without it
    # passes (the first test), so the fault alone breaks them
    shutil.copytree(PACKAGE, tmp_path / "sqlcal", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "sqlcal" / where, "a") as f:
        f.write(f"\n\ndef _planted():\n    {line}\n")
    run = lint_imports(tmp_path, pythonpath=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert PLANTED[where, line] in run.stdout, run.stdout


def test_the_layers_contract_places_every_module(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "sqlcal", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "sqlcal" / "unplaced.py").write_text('"""A module no layer lists."""\n')
    run = lint_imports(tmp_path, pythonpath=tmp_path)
    assert run.returncode == 1 and "sqlcal.unplaced" in run.stdout, run.stdout + run.stderr


def _sqlcal_modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(path: Path, module: str) -> list[str]:
    """``from sqlcal.x import _name`` and ``x._name`` (x an imported sqlcal module) in a file
    that is not sqlcal.x."""
    tree = ast.parse(path.read_text("utf-8"))
    modules = set(_sqlcal_modules())
    aliases: dict[str, str] = {}  # local name -> sqlcal module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "sqlcal":
            for a in node.names:
                target = f"{node.module}.{a.name}"
                if target in modules:
                    aliases[a.asname or a.name] = target
                elif _is_private(a.name) and node.module != module:
                    found.append(f"{path.name}:{node.lineno} from {node.module} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            base = node.value
            dotted = []
            while isinstance(base, ast.Attribute):
                dotted.insert(0, base.attr)
                base = base.value
            if isinstance(base, ast.Name):
                owner = ".".join([aliases.get(base.id, base.id), *dotted])
                if owner in modules and owner != module:
                    found.append(f"{path.name}:{node.lineno} {owner}.{node.attr}")
    return found


def test_private_names_stay_in_their_module():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found += _private_uses(path, module)
    assert found == [], "private names used outside their module: " + "; ".join(found)


def test_the_private_name_check_sees_both_forms(tmp_path):
    path = tmp_path / "user.py"
    path.write_text("from sqlcal.inputs.sources import _connect, source\n"
                    "from sqlcal.query import reductions\n"
                    "import sqlcal.options as o\nreductions._aggregate\no._SPECS\n"
                    "reductions.execute\n"
                    "from sqlcal import __version__\n")
    assert sorted(_private_uses(path, "sqlcal.cli.commands")) == [
        "user.py:1 from sqlcal.inputs.sources import _connect",
        "user.py:4 sqlcal.query.reductions._aggregate",
        "user.py:5 sqlcal.options._SPECS",
    ]


SHADOWED: dict[str, str] = {}  # module -> why a public function still shadows it


@pytest.mark.parametrize("name", [
    pytest.param(p.stem, marks=pytest.mark.xfail(strict=True, reason=SHADOWED[p.stem]))
    if p.stem in SHADOWED else p.stem
    for p in sorted([*PACKAGE.glob("*.py"), *PACKAGE.glob("*/__init__.py")])
    for p in [p.parent if p.name == "__init__.py" and p.parent != PACKAGE else p]
    if p.stem != "__init__"])
def test_a_package_attribute_named_after_a_module_is_that_module(name):
    module = importlib.import_module(f"sqlcal.{name}")
    assert getattr(sqlcal, name) is module


def test_report_the_function_and_reporting_the_module():
    import sqlcal.reporting.report_table as reporting

    assert inspect.ismodule(reporting) and callable(sqlcal.report)
    assert reporting.report is sqlcal.report
    assert "ece" in reporting.METRICS


def test_options_knows_every_checked_function_and_report_metric():
    # options is the bottom layer: it knows a function only once @checked registered it, and the
    # report's metric names only as sqlcal.reporting.report_table declared them (it imports neither)
    checked = [name for name in sqlcal.__all__
               if inspect.isfunction(getattr(sqlcal, name))
               and getattr(sqlcal, name).__code__.co_name == "wrapper"]  # options.checked's
    assert {"ece", "report", "metric_series", "source", "isotonic"} <= set(checked)
    for name in checked:
        params = inspect.signature(getattr(sqlcal, name)).parameters.values()
        own = tuple(p.name for p in params if p.kind == p.KEYWORD_ONLY)
        forwards = any(p.kind == p.VAR_KEYWORD for p in params)
        assert options.keywords(name) == own + (options.SOURCE_OPTIONS if forwards else ()), name
    reporting = importlib.import_module("sqlcal.reporting.report_table")
    for metric, (function, *_) in reporting.METRICS.items():
        assert options.keywords(metric) == options.keywords(function.__name__), metric
