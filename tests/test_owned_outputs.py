"""sqlcal writes only what it owns: output paths that are not regular files are refused before
they are opened, and the temporary files of a writer killed between write and rename are removed
by the next write in that folder (never those of a writer still running)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sqlcal import outputs
from sqlcal.cli.commands import main

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_a_fifo_output_is_refused_before_it_is_opened(tmp_path, monkeypatch):
    """Opening a FIFO for reading blocks until a writer comes: the check must not open it."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo("r.json")
    code = """
import sqlcal.outputs as o
try:
    o.check("r.json", "json")
except o.OutputError as e:
    print(e)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=_env(), cwd=tmp_path)
    assert "not a regular file" in run.stdout, run.stdout + run.stderr


def _writer(folder: Path, name: str) -> subprocess.Popen:
    """A process inside outputs.replacing: it has written its temporary file and waits to rename
    it (it prints the temporary path when it gets there)."""
    code = textwrap.dedent(f"""
        import sys, time
        from sqlcal import outputs
        with outputs.replacing({str(folder / name)!r}) as partial:
            with open(partial, "w") as f:
                f.write('{{"generator": "sqlcal"}}')
            print(partial, flush=True)
            time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=_env())
    line = proc.stdout.readline().strip()
    assert line and os.path.exists(line), line
    proc.partial = line
    return proc


def test_a_killed_writer_leaves_no_temporary_after_the_next_run(tmp_path, monkeypatch):
    """SIGKILL between write and rename leaves the temporary file; the next write in the folder
    removes it, but not the temporary file of a writer that is still running."""
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("mine\n")
    Path(".notes.txt.1234abcd.partial").write_text("a file of the user's, named alike\n")
    killed = _writer(tmp_path, "report.json")
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    assert os.path.exists(killed.partial)  # the kill left it
    alive = _writer(tmp_path, "other.json")
    try:
        outputs.write_text("report.json", "json", json.dumps({"generator": "sqlcal"}))
        assert not os.path.exists(killed.partial)
        assert os.path.exists(alive.partial)  # a running writer's file is not touched
    finally:
        alive.send_signal(signal.SIGKILL)
        alive.wait(timeout=60)
    alive_entry = Path(alive.partial).relative_to(tmp_path).parts[0]
    assert sorted(os.listdir(tmp_path)) == sorted(
        [".notes.txt.1234abcd.partial", "notes.txt", "report.json", alive_entry])
    assert json.loads(Path("report.json").read_text()) == {"generator": "sqlcal"}
    assert Path(".notes.txt.1234abcd.partial").read_text() == "a file of the user's, named alike\n"


# -- folder outputs: the dbt package and sql/ -------------------------------------------------


def _tree(root: Path) -> dict:
    """Every entry under ``root``: bytes and mode of files, targets of symlinks, folders."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        st = path.lstat()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir", st.st_mode)
        elif path.is_fifo():
            out[rel] = ("fifo", st.st_mode)
        else:
            out[rel] = ("file", path.read_bytes(), st.st_mode)
    return out


def _dbt(capsys, folder) -> tuple[int, str, str]:
    try:
        code = main(["dbt", str(folder)])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path):
    """A user's dbt project, and a file outside it."""
    root = tmp_path / "proj"
    (root / "macros").mkdir(parents=True)
    (root / "dbt_project.yml").write_text("name: mine\nversion: '1.0'\nconfig-version: 2\n")
    (root / "README.md").write_text("# my project\n")
    (root / "macros" / "mine.sql").write_text("{% macro mine() %}1{% endmacro %}\n")
    (tmp_path / "outside.txt").write_text("not sqlcal's\n")
    return root


def test_dbt_refuses_a_foreign_dbt_project(tmp_path, capsys, project):
    before = _tree(tmp_path)
    code, out, err = _dbt(capsys, project)
    assert code == 2 and "wrote" not in out
    assert err.startswith("sqlcal: error: ") and "dbt project" in err and "Traceback" not in err
    assert _tree(tmp_path) == before


def test_dbt_refuses_a_folder_with_files_it_did_not_write(tmp_path, capsys):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "notes.txt").write_text("mine\n")
    before = _tree(tmp_path)
    code, out, err = _dbt(capsys, tmp_path / "pkg")
    assert code == 2 and "not empty" in err and _tree(tmp_path) == before


@pytest.mark.parametrize("where", ["README.md", "macros/store.sql", "macros", "."])
def test_dbt_never_follows_a_symlink(tmp_path, capsys, where):
    """In a package sqlcal wrote, a file, the macros folder or the folder itself replaced by a
    symlink to something outside is refused, and the outside is unchanged."""
    pkg = tmp_path / "pkg"
    assert _dbt(capsys, pkg)[0] == 0
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "store.sql").write_text("theirs\n")
    target = pkg / where
    if where == ".":
        os.rename(pkg, tmp_path / "real")
        pkg.symlink_to(tmp_path / "outside")
    elif where == "macros":
        os.rename(target, tmp_path / "old_macros")
        target.symlink_to(tmp_path / "outside")
    else:
        target.unlink()
        target.symlink_to(tmp_path / "outside" / "store.sql")
    before = _tree(tmp_path)
    code, out, err = _dbt(capsys, pkg)
    assert code == 2 and "symlink" in err and "Traceback" not in err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("kind", ["fifo", "dir", "foreign"])
def test_dbt_refuses_what_is_not_its_file_at_its_paths(tmp_path, capsys, kind):
    pkg = tmp_path / "pkg"
    assert _dbt(capsys, pkg)[0] == 0
    target = pkg / "macros" / "summaries.sql"
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dir":
        target.mkdir()
    else:
        target.write_text("select 1 -- my own\n")
    before = _tree(tmp_path)
    code, out, err = _dbt(capsys, pkg)
    assert code == 2 and "summaries.sql" in err and "Traceback" not in err
    assert _tree(tmp_path) == before


def test_dbt_rewrites_its_own_package_and_removes_only_its_stale_files(tmp_path, capsys):
    """A rerun replaces sqlcal's files; a file an earlier version wrote (in the manifest, with
    the mark) is removed; the user's own macro and an unmarked file of the manifest stay."""
    from sqlcal.export import dbtgen

    pkg = tmp_path / "pkg"
    assert _dbt(capsys, pkg)[0] == 0
    manifest = json.loads((pkg / outputs.MANIFEST).read_text())
    assert sorted(manifest["files"]) == sorted(dbtgen.render())
    old = "{# sqlcal: generated by `python -m sqlcal.export.dbtgen`; do not edit. #}\nold\n"
    (pkg / "macros" / "old.sql").write_text(old)
    (pkg / "macros" / "edited.sql").write_text("{# my macro now #}\n")
    (pkg / "macros" / "mine.sql").write_text("{% macro mine() %}1{% endmacro %}\n")
    manifest["files"] += ["macros/old.sql", "macros/edited.sql"]
    (pkg / outputs.MANIFEST).write_text(json.dumps(manifest))
    (pkg / "README.md").write_text("<!-- sqlcal: generated by an older sqlcal -->\nold\n")
    code, out, err = _dbt(capsys, pkg)
    assert code == 0, err
    assert not (pkg / "macros" / "old.sql").exists()
    assert (pkg / "macros" / "mine.sql").exists() and (pkg / "macros" / "edited.sql").exists()
    for name, text in dbtgen.render().items():
        assert (pkg / name).read_text() == text
    assert sorted(json.loads((pkg / outputs.MANIFEST).read_text())["files"]) == sorted(
        dbtgen.render())
    assert "removed" in out and "old.sql" in out


@pytest.mark.parametrize("module", ["sqlcal.export.dbtgen", "sqlcal.export.sqlgen"])
def test_generators_have_an_argument_parser(tmp_path, module):
    run = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                         text=True, timeout=120, env=_env(), cwd=tmp_path)
    assert run.returncode == 0 and "usage:" in run.stdout, run.stdout + run.stderr
    assert os.listdir(tmp_path) == []


# -- sqlcal demo --------------------------------------------------------------------------------


@pytest.mark.parametrize("statement", [
    "CREATE SEQUENCE ids", "CREATE MACRO plus_one(a) AS a + 1",
    "CREATE MACRO rows_of() AS TABLE SELECT 1 AS a", "CREATE TYPE mood AS ENUM ('ok', 'sad')",
    "CREATE SCHEMA mine", "CREATE INDEX by_score ON predictions (score)"])
def test_demo_never_replaces_a_database_with_objects_it_did_not_write(tmp_path, capsys,
                                                                       monkeypatch, statement):
    import duckdb

    monkeypatch.chdir(tmp_path)
    assert main(["demo", "d.duckdb", "--rows", "500"]) == 0
    con = duckdb.connect("d.duckdb")
    con.execute(statement)
    con.close()
    capsys.readouterr()
    before = _tree(tmp_path)
    code = main(["demo", "d.duckdb", "--rows", "500"])
    out, err = capsys.readouterr()
    assert code == 2 and "wrote" not in out and "Traceback" not in err, (out, err)
    assert err.startswith("sqlcal: error: ") and "d.duckdb" in err
    assert _tree(tmp_path) == before


def test_demo_replaces_its_own_database_and_leaves_no_temporary(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "d.duckdb", "--rows", "500"]) == 0
    assert main(["demo", "d.duckdb", "--rows", "700", "--seed", "1"]) == 0
    assert "total weight 700" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == ["d.duckdb"]


def test_a_fifo_demo_path_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("d.duckdb")
    code, _, err = main(["demo", "d.duckdb"]), *capsys.readouterr()
    assert code == 2 and "FIFO" in err
