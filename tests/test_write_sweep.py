"""The sweep of every command and function that writes: at each output path in turn, a
pre-existing foreign file, a symlink to a foreign file, a FIFO and a directory. Each must be
exit 2 (a ValueError from Python) with one line naming the path, never 0 with "wrote", and
nothing anywhere under the test's root may change: every file's bytes and mode, every folder's
mode, every symlink's target, every FIFO, before and after.

A control run per writer, with the output path absent, shows that the sweep reaches the writer:
it succeeds, says "wrote", and changes nothing but its own output."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import duckdb
import pytest

import sqlcal
from sqlcal.cli.commands import main
from sqlcal.cli.demo import write_demo
from sqlcal.export import dbtgen, sqlgen
from sqlcal.inputs import sources
from sqlcal.monitor import store as _store

SOURCE = ['[source]\ndata = "d.duckdb"\ntable = "predictions"\nscore = "score"\n'
          'label = "label"\nweight = "weight"\nby = ["model"]\n']
REPORT = SOURCE[0] + '[metrics]\nbrier = {}\n[report]\ndiagrams = false\n'
MONITOR = SOURCE[0] + 'time = "day"\n[snapshot]\nstore = "{store}"\n'
COLUMNS = ["--score", "score", "--label", "label"]
AT = "2027-01-31"

#: writer -> (files it needs, command; "OUT" (or "OUT.duckdb" for a database) is the output
#: path, "cli" the sqlcal command, "dbtgen"/"sqlgen" the generators' own commands, "python" a
#: call)
WRITERS = {
    "report --json-file": ({}, ["cli", "report", "d.parquet", *COLUMNS, "--json-file", "OUT"]),
    "report --html": ({}, ["cli", "report", "d.parquet", *COLUMNS, "--html", "OUT"]),
    "report [output] json": ({"r.toml": REPORT + '[output]\njson = "OUT"\n'},
                             ["cli", "report", "--config", "r.toml"]),
    "report [output] html": ({"r.toml": REPORT + '[output]\nhtml = "OUT"\n'},
                             ["cli", "report", "--config", "r.toml"]),
    "report [results] url": ({"r.toml": REPORT + '[results]\ntable = "r"\nurl = "OUT.duckdb"\n'},
                             ["cli", "report", "--config", "r.toml"]),
    "sqlcal dbt": ({}, ["cli", "dbt", "OUT"]),
    "python -m sqlcal.export.dbtgen": ({}, ["dbtgen", "OUT"]),
    "python -m sqlcal.export.sqlgen": ({}, ["sqlgen", "OUT"]),
    "sqlcal demo": ({}, ["cli", "demo", "OUT", "--rows", "300"]),
    "sqlcal demo --examples": ({}, ["cli", "demo", "ex/demo.duckdb", "--rows", "300",
                                    "--examples"]),
    "sqlcal snapshot [snapshot] store": ({"m.toml": MONITOR.format(store="OUT.duckdb")},
                                         ["cli", "snapshot", "--config", "m.toml", "--quiet"]),
    "sqlcal monitor [snapshot] store": (
        {"m.toml": MONITOR.format(store="OUT.duckdb") + '[monitor]\nresults_table = "checks"\n'},
        ["cli", "monitor", "--config", "m.toml", "--at", AT]),
    "sqlcal monitor --json-file": ({"m.toml": MONITOR.format(store="store.duckdb")},
                                   ["cli", "monitor", "--config", "m.toml", "--at", AT,
                                    "--no-windows", "--json-file", "OUT"]),
    "sqlcal monitor --html": ({"m.toml": MONITOR.format(store="store.duckdb")},
                              ["cli", "monitor", "--config", "m.toml", "--at", AT,
                               "--no-windows", "--html", "OUT"]),
    "sqlcal segments --json": ({}, ["cli", "segments", "d.parquet", *COLUMNS, "--features",
                                    "model", "--json", "OUT"]),
    "sqlcal.snapshot(store=)": ({}, ["python", "snapshot"]),
}
VARIANTS = ("foreign file", "symlink to a foreign file", "FIFO", "directory")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A source database (and its Parquet copy) and a store holding its snapshots."""
    root = tmp_path_factory.mktemp("sweep")
    write_demo(str(root / "d.duckdb"), rows=3000)
    con = duckdb.connect(str(root / "d.duckdb"), read_only=True)
    con.execute(f"COPY predictions TO '{root / 'd.parquet'}' (FORMAT parquet)")
    con.close()
    store = str(root / "store.duckdb")
    sqlcal.snapshot(str(root / "d.duckdb"), table="predictions", score="score", label="label",
                    weight="weight", by=["model"], time="day", store=store, as_of=AT)
    _close_under(root)
    return root


def _close_under(root: Path) -> None:
    """Close the connections sqlcal keeps to files under ``root`` (they hold the files open)."""
    for cache in (sources.connections, _store._CONNECTIONS):
        for key in [k for k in cache if str(k).startswith(str(root))]:
            cache.pop(key).disconnect()


@pytest.fixture
def ws(base, tmp_path, monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(base, work)
    (tmp_path / "outside").mkdir()
    secret = tmp_path / "outside" / "secret.txt"
    secret.write_text("the user's own file\n")
    os.chmod(secret, 0o640)
    monkeypatch.chdir(work)
    yield tmp_path
    _close_under(tmp_path)


def _tree(root: Path) -> dict:
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
        else:
            out[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode))
    return out


def _place(variant: str, out: Path) -> None:
    if variant == "foreign file":
        out.write_text("the user's own data\n")
        os.chmod(out, 0o600)
    elif variant == "symlink to a foreign file":
        out.symlink_to(out.parent.parent / "outside" / "secret.txt")
    elif variant == "FIFO":
        os.mkfifo(out)
    else:
        out.mkdir()
        (out / "mine.txt").write_text("mine\n")


def _out(writer: str) -> Path:
    """The writer's output path (for --examples, one of the files it writes beside the demo)."""
    files, command = WRITERS[writer]
    if "--examples" in command:
        return Path("ex/preds.parquet")
    text = " ".join([*command, *files.values()])
    return Path("OUT.duckdb" if "OUT.duckdb" in text or command[0] == "python" else "OUT")


def _run(writer: str, capsys) -> tuple[int, str, str]:
    files, command = WRITERS[writer]
    for name, text in files.items():
        Path(name).write_text(text)
    argv = command[1:]
    if command[0] == "python":
        try:
            sqlcal.snapshot("d.duckdb", table="predictions", score="score", label="label",
                            weight="weight", time="day", store="OUT.duckdb", as_of=AT)
            code = 0
        except (ValueError, TypeError) as e:
            print(f"sqlcal: error: {e}", file=__import__("sys").stderr)
            code = 2
    else:
        run = main if command[0] == "cli" else getattr(
            {"dbtgen": dbtgen, "sqlgen": sqlgen}[command[0]], "main")
        try:
            code = run(argv)
        except SystemExit as e:
            code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("writer", list(WRITERS))
def test_nothing_changes_but_exit_2_at_a_path_sqlcal_does_not_own(ws, capsys, writer, variant):
    _out(writer).parent.mkdir(exist_ok=True)
    _place(variant, _out(writer))
    files = WRITERS[writer][0]
    for name, text in files.items():  # the command's own files are there before the snapshot
        Path(name).write_text(text)
    before = _tree(ws)
    code, out, err = _run(writer, capsys)
    assert code == 2, (code, out, err)
    assert "wrote" not in out and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0] and str(_out(writer).name) in lines[0], err
    assert _tree(ws) == before


@pytest.mark.parametrize("writer", [w for w in WRITERS if "[snapshot] store" not in w
                                    or "snapshot --config" in w])
def test_control_the_writer_writes_when_the_path_is_free(ws, capsys, writer):
    _out(writer).parent.mkdir(exist_ok=True)
    files = WRITERS[writer][0]
    for name, text in files.items():
        Path(name).write_text(text)
    before = _tree(ws)
    code, out, err = _run(writer, capsys)
    assert code in (0, 3), (code, out, err)  # 3: the monitor's demo alarms
    if WRITERS[writer][1][0] == "cli" and "--quiet" not in WRITERS[writer][1]:
        assert "wrote" in out or "alarm" in out, out
    after = _tree(ws)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    out = f"work/{_out(writer) if _out(writer).parent == Path('.') else _out(writer).parent}/"
    out = out.rstrip("/") if _out(writer).parent == Path(".") else out
    assert changed and all(k.startswith(out) for k in changed), sorted(changed)  # and its .wal


def test_sqlcal_sql_prints_and_writes_nothing(ws, capsys):
    before = _tree(ws)
    assert main(["sql", "ece", "--table", "t", "--score", "p", "--label", "y"]) == 0
    assert "SELECT" in capsys.readouterr().out
    assert _tree(ws) == before
