"""Hostile input at the command line: every bad input is exit 2 with one line naming the problem
(no traceback), every file and every table is unchanged afterwards, outputs never replace data,
and a bug still shows its traceback."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import ibis
import pytest

from sqlcal import outputs
from sqlcal.cli.commands import main
from sqlcal.cli.demo import DEMO_COMMENT, write_demo
from sqlcal.export.sqlgen import metrics as sql_metrics
from sqlcal.inputs import sources
from sqlcal.reporting import html, scheduled
from sqlcal.reporting.report_table import METRICS

COLUMNS = ["--score", "score", "--label", "label"]
DB = ["d.duckdb", "--table", "predictions"]
EXAMPLE = Path(__file__).parent.parent / "examples" / "report.toml"


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A folder a user might run sqlcal in: a demo database with a second table of their own,
    the same rows as Parquet and CSV, a folder of Parquet parts, a corrupt Parquet file, an empty
    folder, an unrelated text file and an SQLite file. The current folder is ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    write_demo("d.duckdb", rows=3000)
    con = duckdb.connect("d.duckdb")
    con.execute("CREATE TABLE secret AS SELECT range AS id FROM range(7)")
    con.execute("COPY predictions TO 'd.parquet' (FORMAT parquet)")
    con.execute("COPY predictions TO 'd.csv' (HEADER)")
    os.mkdir("parts")
    con.execute("COPY (SELECT * FROM predictions WHERE model = 'v1') TO 'parts/a.parquet' "
                "(FORMAT parquet)")
    con.execute("COPY (SELECT * FROM predictions WHERE model = 'v2') TO 'parts/b.parquet' "
                "(FORMAT parquet)")
    con.close()
    Path("corrupt.parquet").write_bytes(b"PAR1 this is not a parquet file")
    os.mkdir("empty")
    Path("notes.txt").write_text("my notes\n")
    Path("bad.toml").write_text("[source\ndata = 1\n")
    Path("options.toml").write_text(
        '[source]\ndata = "d.parquet"\nscore = "score"\nlabel = "label"\n'
        '[metrics]\nhosmer_lemeshow = { bins = 0 }\n')
    Path("app.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(100))  # by its header
    return tmp_path


def snapshot(folder: Path) -> dict:
    """Every file's SHA-256 and, for each DuckDB database, its tables and row counts."""
    state = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            state[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_symlink():
            state[str(path.relative_to(folder))] = "-> " + os.readlink(path)
    for path in sorted(folder.glob("*.duckdb")):
        con = duckdb.connect(str(path), read_only=True)
        try:
            tables = [t for (t,) in con.execute(
                "SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
            state[f"{path.name} tables"] = {
                t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
        finally:
            con.close()
    return state


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``sqlcal ARGV`` in-process: (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse: --help, bad flags
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(err: str, *names: str) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sqlcal: error: "), err
    for name in names:
        assert name in lines[0], (name, err)


@pytest.fixture
def no_query(monkeypatch):
    """Fail the test if a scheduled run opens its source (a refusal must come before)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the source was opened before the refusal")

    monkeypatch.setattr(scheduled, "_open_source", refuse)


# -- bad input: exit 2, one line, nothing changed -----------------------------------------------

BAD_INPUT = {
    "misspelled column in --where": (
        ["report", *DB, *COLUMNS, "--where", "scroe > 0.5"], ["scroe"]),
    "two statements in --where": (
        ["report", *DB, *COLUMNS, "--where", "1=1; DROP TABLE secret"], ["where"]),
    "missing table": (["report", "d.duckdb", "--table", "nope", *COLUMNS], ["nope"]),
    "misspelled score column": (["report", *DB, "--score", "scroe", "--label", "label"],
                                ["scroe"]),
    "corrupt Parquet file": (["report", "corrupt.parquet", *COLUMNS], ["corrupt.parquet"]),
    "empty folder": (["report", "empty", *COLUMNS], ["empty", "No files found"]),
    "missing file": (["report", "missing.parquet", *COLUMNS], ["missing.parquet"]),
    "missing DuckDB file": (["report", "missing.duckdb", *COLUMNS], ["missing.duckdb"]),
    "unknown file kind": (["report", "notes.txt", *COLUMNS], ["notes.txt"]),
    "bad TOML": (["report", "--config", "bad.toml"], ["bad.toml", "not valid TOML"]),
    "missing config": (["report", "--config", "absent.toml"], ["absent.toml"]),
    "unreachable Postgres": (
        ["report", "postgres://postgres:postgres@127.0.0.1:1/x", "--table", "t", *COLUMNS],
        ["connect"]),
    "JSON output is the source DuckDB file": (
        ["report", "d.duckdb", "--table", "predictions", *COLUMNS, "--json-file", "d.duckdb"],
        ["d.duckdb", "reads"]),
    "HTML output is the Parquet input": (
        ["report", "d.parquet", *COLUMNS, "--html", "d.parquet"], ["d.parquet", "reads"]),
    "JSON output is the CSV input": (
        ["report", "d.csv", *COLUMNS, "--json-file", "d.csv"], ["d.csv", "reads"]),
    "output is a file the glob matches": (
        ["report", "parts/*.parquet", *COLUMNS, "--json-file", "parts/a.parquet"],
        ["parts/a.parquet", "source pattern"]),
    "new output the glob would read": (
        ["report", "parts/*.parquet", *COLUMNS, "--json-file", "parts/new.parquet"],
        ["new.parquet", "source pattern"]),
    "output is a hard link to the CSV input": (
        ["report", "d.csv", *COLUMNS, "--json-file", "hard.json"], ["hard.json", "reads"]),
    "output inside a folder source": (
        ["report", "parts", *COLUMNS, "--json-file", "parts/report.json"],
        ["parts", "inside the source folder"]),
    "output is another DuckDB database": (
        ["report", "d.parquet", *COLUMNS, "--json-file", "other.duckdb"],
        ["other.duckdb", "DuckDB database"]),
    "output is an SQLite database": (
        ["report", "d.parquet", *COLUMNS, "--html", "app.sqlite"], ["app.sqlite", "SQLite"]),
    "metric option out of range in a config": (
        ["report", "--config", "options.toml"], ["metrics.hosmer_lemeshow", "bins"]),
    "output is an unrelated file": (
        ["report", "d.parquet", *COLUMNS, "--json-file", "notes.txt"],
        ["notes.txt", "not a previous sqlcal json output"]),
    "output is a directory": (
        ["report", "d.parquet", *COLUMNS, "--json-file", "empty"], ["empty", "directory"]),
    "output is a symlink": (
        ["report", "d.parquet", *COLUMNS, "--json-file", "link.json"], ["link.json", "symlink"]),
    "JSON and HTML on one path": (
        ["report", "d.parquet", *COLUMNS, "--json-file", "r.out", "--html", "r.out"],
        ["r.out", "both"]),
    "--output-dir makes the output the source": (
        ["report", "d.parquet", *COLUMNS, "--output-dir", ".", "--json-file", "d.parquet"],
        ["d.parquet", "reads"]),
    "demo over a database with other tables": (["demo", "d.duckdb"], ["d.duckdb", "secret"]),
    "demo over a Parquet file": (["demo", "d.parquet"], ["d.parquet"]),
    "demo over a directory": (["demo", "empty"], ["empty", "directory"]),
    "demo over a symlink": (["demo", "link.json"], ["link.json", "symlink"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_exit_2_and_changes_nothing(ws, capsys, no_query, case):
    argv, names = BAD_INPUT[case]
    Path("other.duckdb").write_bytes(Path("d.duckdb").read_bytes())
    os.symlink("notes.txt", "link.json")
    os.link("d.csv", "hard.json")
    before = snapshot(ws)
    code, out, err = cli(capsys, *argv)
    assert code == 2
    assert_one_line(err, *names)
    assert out == ""
    assert snapshot(ws) == before


def test_bad_input_through_a_config_file(ws, capsys, no_query):
    # the same refusals when the paths come from a TOML file other people edit
    Path("r.toml").write_text(
        '[source]\ndata = "d.duckdb"\ntable = "predictions"\nscore = "score"\nlabel = "label"\n'
        '[output]\njson = "d.duckdb"\n[results]\ntable = "calibration_results"\n')
    before = snapshot(ws)
    code, _, err = cli(capsys, "report", "--config", "r.toml")
    assert code == 2
    assert_one_line(err, "d.duckdb", "reads")
    Path("r.toml").write_text(Path("r.toml").read_text().replace('json = "d.duckdb"',
                                                                 'html = "notes.txt"'))
    before = snapshot(ws)
    code, _, err = cli(capsys, "report", "--config", "r.toml")
    assert code == 2
    assert_one_line(err, "notes.txt", "not a previous sqlcal html output")
    Path("r.toml").write_text(Path("r.toml").read_text().replace('html = "notes.txt"',
                                                                 "html = 3"))
    before = snapshot(ws)
    code, _, err = cli(capsys, "report", "--config", "r.toml")
    assert code == 2
    assert_one_line(err, "[output] html")
    assert snapshot(ws) == before


def test_postgres_url_without_the_extra_names_it(ws, capsys, monkeypatch):
    # as if `pip install sqlcal` without [postgres]: the driver cannot be imported
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "ibis.backends.postgres", raising=False)
    if "postgres" in vars(ibis):  # loaded by an earlier test (getattr would load it)
        monkeypatch.delattr(ibis, "postgres")
    before = snapshot(ws)
    code, _, err = cli(capsys, "report", "postgres://u:p@localhost:5432/x", "--table", "t",
                       *COLUMNS)
    assert code == 2
    assert_one_line(err, "pip install '.[postgres]'")
    assert snapshot(ws) == before


BAD_FLAGS = {
    "--bins not a number": (["report", *DB, *COLUMNS, "--bins", "abc"], ["--bins"]),
    "unknown metric": (["report", *DB, *COLUMNS, "--metrics", "ece,nope"], ["'nope'"]),
    "unknown dialect": (["sql", "ece", "--dialect", "oracle", "--table", "t", "--score", "p",
                         "--label", "y"], ["--dialect", "oracle"]),
    "unknown sql metric": (["sql", "nope", "--table", "t", "--score", "p", "--label", "y"],
                           ["nope"]),
    "unknown --on-invalid": (["report", *DB, *COLUMNS, "--on-invalid", "maybe"],
                             ["--on-invalid", "maybe"]),
    "unknown flag": (["report", *DB, *COLUMNS, "--colour"], ["--colour"]),
    "DATA and --config": (["report", "d.duckdb", "--config", "bad.toml"], ["either DATA"]),
    "no label": (["report", *DB, "--score", "score"], ["--label"]),
    "--no-results without --config": (["report", *DB, *COLUMNS, "--no-results"],
                                      ["--no-results"]),
    "--run-id without an output": (["report", *DB, *COLUMNS, "--run-id", "x"],
                                   ["--run-id"]),
    "--output-dir without an output": (["report", *DB, *COLUMNS, "--output-dir", "o"],
                                       ["--output-dir"]),
    "--quiet without an output": (["report", *DB, *COLUMNS, "--quiet"], ["--quiet"]),
    "no command": ([], ["command"]),
    "demo of no rows": (["demo", "new.duckdb", "--rows", "0"], ["--rows", "positive"]),
    "demo of a table name with a quote": (["demo", "new.duckdb", "--table", "t\"; DROP x"],
                                          ["t\"; DROP x"]),
    "--score with --config": (["report", "--config", "bad.toml", "--score", "p"],
                              ["--score", "does not apply with --config"]),
    "--bins with --config": (["report", "--config", "bad.toml", "--bins", "5"], ["--bins"]),
    "--bins zero": (["report", *DB, *COLUMNS, "--bins", "0"], ["--bins", "positive"]),
    "--bins over the budget": (["report", *DB, *COLUMNS, "--bins", "1000000000"],
                               ["--bins", "budget"]),
}


@pytest.mark.parametrize("case", list(BAD_FLAGS))
def test_bad_flags_are_one_line_exit_2(ws, capsys, case):
    argv, names = BAD_FLAGS[case]
    before = snapshot(ws)
    code, out, err = cli(capsys, *argv)
    assert code == 2
    assert_one_line(err, *names)
    assert out == ""
    assert snapshot(ws) == before


def test_a_bug_keeps_its_traceback(ws, capsys, monkeypatch):
    # exit 1 stays "a bug": an unexpected exception is not dressed up as bad input
    import sqlcal.reporting.report_table as report_module

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(report_module, "report", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["report", *DB, *COLUMNS])
    monkeypatch.setattr(scheduled, "_measure", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["report", *DB, *COLUMNS, "--json-file", "r.json"])
    assert not Path("r.json").exists()


def test_broken_pipe_ends_quietly(ws):
    # `sqlcal report ... | head -1`: 3000 groups print far more than a pipe buffer holds
    script = "import sys; from sqlcal.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "report", *DB, *COLUMNS, "--by", "score,day",
         "--metrics", "brier"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ws)
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as head does
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=300)
    assert b"brier" in first
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err
    assert code == 0  # the report was made; only its printing stopped


# -- outputs ----------------------------------------------------------------------------------


def test_ad_hoc_html_and_json_are_written_not_ignored(ws, capsys):
    before = snapshot(ws)
    code, out, err = cli(capsys, "report", "d.parquet", *COLUMNS, "--weight", "weight", "--by",
                         "model", "--metrics", "ece,brier", "--html", "out/r.html",
                         "--json-file", "out/r.json", "--run-id", "adhoc-1", "--quiet")
    assert code == 0, err
    assert "wrote ./out/r.html" in out and "wrote ./out/r.json" in out
    doc = json.loads(Path("out/r.json").read_text())
    assert doc["generator"] == "sqlcal" and doc["run"]["id"] == "adhoc-1"
    import jsonschema

    jsonschema.validate(doc, scheduled.json_schema())
    # the numbers are the plain report's numbers (weighted ECE and Brier by model, from numpy)
    frame = duckdb.connect().execute("SELECT * FROM 'd.parquet'").df()
    for row in doc["rows"]:
        part = frame[frame.model == row["model"]]
        brier = ((part.score - part.label) ** 2 * part.weight).sum() / part.weight.sum()
        assert row["brier"] == pytest.approx(brier, rel=1e-12)
    page = Path("out/r.html").read_text()
    assert outputs.HTML_MARKER in page  # two groups, two diagrams each
    assert page.count('data-chart="reliability"') == page.count('data-chart="cumulative"') == 2
    after = snapshot(ws)
    assert {k: v for k, v in after.items() if not k.startswith("out/")} == before


def test_previous_output_is_replaced_atomically(ws, capsys):
    argv = ["report", "d.parquet", *COLUMNS, "--metrics", "brier", "--json-file", "r.json"]
    assert cli(capsys, *argv, "--run-id", "first")[0] == 0
    inode = os.stat("r.json").st_ino
    assert cli(capsys, *argv, "--run-id", "second")[0] == 0
    assert json.loads(Path("r.json").read_text())["run"]["id"] == "second"
    assert os.stat("r.json").st_ino != inode  # a new file renamed into place, not rewritten
    assert not [p for p in os.listdir(".") if p.endswith(".partial")]
    # a JSON output is not an HTML output, and the other way round
    before = snapshot(ws)
    code, _, err = cli(capsys, "report", "d.parquet", *COLUMNS, "--metrics", "brier", "--html",
                       "r.json")
    assert code == 2
    assert_one_line(err, "r.json", "not a previous sqlcal html output")
    assert snapshot(ws) == before


def test_json_output_pointing_at_an_html_output_is_refused(ws, capsys, monkeypatch):
    monkeypatch.setattr(html, "report_charts", lambda run, step: {})  # no diagrams needed here
    assert cli(capsys, "report", "d.parquet", *COLUMNS, "--metrics", "brier", "--html",
               "r.html")[0] == 0
    before = snapshot(ws)
    code, _, err = cli(capsys, "report", "d.parquet", *COLUMNS, "--metrics", "brier",
                       "--json-file", "r.html")
    assert code == 2
    assert_one_line(err, "r.html", "not a previous sqlcal json output")
    assert snapshot(ws) == before


def test_a_failed_write_leaves_the_old_file_and_no_temporary(ws, monkeypatch):
    Path("r.json").write_text(json.dumps({"generator": "sqlcal", "old": True}))
    before = snapshot(ws)

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(outputs.OutputError, match="r.json.*No space left on device"):
        outputs.write_text("r.json", "json", json.dumps({"generator": "sqlcal"}))
    assert snapshot(ws) == before
    assert os.listdir(".") == os.listdir(ws)
    assert not [p for p in os.listdir(".") if p.endswith(".partial")]


def test_a_reformatted_previous_json_output_is_still_ours(ws):
    # e.g. `jq -S .` sorted its keys: the marker is no longer first, the file still sqlcal's
    Path("r.json").write_text(json.dumps({"alerts": [], "generator": "sqlcal"}, indent=4))
    assert outputs.is_output("r.json", "json")
    Path("r.json").write_text(json.dumps({"generator": "someone else"}))
    assert not outputs.is_output("r.json", "json")
    with pytest.raises(outputs.OutputError, match="not a previous sqlcal json output"):
        outputs.check("r.json", "json")


def test_outputs_refuse_text_without_the_marker(ws):
    # the writer only writes what a later run will recognise as its own
    with pytest.raises(ValueError, match="generator"):
        outputs.write_text("r.json", "json", "{}")
    with pytest.raises(ValueError, match="generator"):
        outputs.write_text("r.html", "html", "<html></html>")
    assert not Path("r.json").exists() and not Path("r.html").exists()


# -- diagrams and matplotlib ------------------------------------------------------------------


def test_no_diagrams_without_an_html_output(ws, capsys, monkeypatch):
    def drawn(*args, **kwargs):
        raise AssertionError("a diagram was drawn for a run without an HTML output")

    monkeypatch.setattr(html, "report_charts", drawn)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # and matplotlib is not needed
    Path("r.toml").write_text(
        '[source]\ndata = "d.duckdb"\ntable = "predictions"\nscore = "score"\nlabel = "label"\n'
        'by = ["model", "segment"]\n[metrics]\nece = {}\n[output]\njson = "r.json"\n')
    code, _, err = cli(capsys, "report", "--config", "r.toml")
    assert code == 0, err
    assert len(json.loads(Path("r.json").read_text())["groups"]) == 8


def test_readme_example_without_matplotlib_writes_its_page(ws, capsys, monkeypatch):
    # the README's scheduled report after a plain `pip install .`: the page draws its charts
    # with Plotly (a dependency), so matplotlib (the plot extra) is not needed
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    os.remove("d.duckdb")
    assert cli(capsys, "demo", "demo.duckdb", "--rows", "2000")[0] == 0
    Path("report.toml").write_text(EXAMPLE.read_text())
    code, _, err = cli(capsys, "report", "--config", "report.toml", "--run-id", "2026-11-22",
                       "--quiet")
    assert code in (0, 3), err
    page = Path("report.html").read_text()
    assert outputs.HTML_MARKER in page and 'data-chart="reliability"' in page


def test_results_go_in_after_measuring_through_their_own_connection(ws, capsys, monkeypatch):
    events = []
    connect = ibis.duckdb.connect
    measure = scheduled.run_report

    def spy_connect(*args, **kwargs):
        events.append(("connect", os.path.basename(str(args[0])) if args else "",
                       kwargs.get("read_only", False)))
        return connect(*args, **kwargs)

    def spy_measure(*args, **kwargs):
        run = measure(*args, **kwargs)
        events.append(("measured",))
        return run

    attached = sources.DuckDBFile.attached

    def spy_attached(self):  # each query on the source attaches the file read-only
        if events[-1:] != [("read", os.path.basename(self._file))]:
            events.append(("read", os.path.basename(self._file)))
        return attached(self)

    monkeypatch.setattr(ibis.duckdb, "connect", spy_connect)
    monkeypatch.setattr(sources.DuckDBFile, "attached", spy_attached)
    monkeypatch.setattr(scheduled, "run_report", spy_measure)
    Path("r.toml").write_text(
        '[source]\ndata = "d.duckdb"\ntable = "predictions"\nscore = "score"\nlabel = "label"\n'
        'by = "model"\n[metrics]\nbrier = {}\n[results]\ntable = "calibration_results"\n')
    before = snapshot(ws)
    for _ in range(2):
        code, out, err = cli(capsys, "report", "--config", "r.toml", "--run-id", "n1")
        assert code == 0, err
    assert "wrote 0 rows in table calibration_results (run id n1 was already there)" in out
    on_file = [e for e in events if e[0] == "measured" or e[1] == "d.duckdb"]
    # each run: measured read-only, then one read-write connection for the insert, then a new
    # read-only one that reads the run's rows back
    assert on_file == [("read", "d.duckdb"), ("measured",), ("connect", "d.duckdb", False),
                       ("connect", "d.duckdb", True)] * 2
    after = snapshot(ws)
    assert after["d.duckdb tables"] == {**before["d.duckdb tables"], "calibration_results": 2}


# -- the demo and the help --------------------------------------------------------------------


def test_demo_prints_the_true_row_count_and_weight(ws, capsys):
    code, out, _ = cli(capsys, "demo", "new.duckdb", "--rows", "4000")
    assert code == 0
    con = duckdb.connect("new.duckdb", read_only=True)
    rows, weight, comment = con.execute(
        "SELECT count(*), sum(weight), any_value(comment) FROM predictions, duckdb_tables() "
        "WHERE table_name = 'predictions'").fetchone()
    con.close()
    assert rows < 4000 and weight == 4000 and comment == DEMO_COMMENT
    assert f"wrote {rows} rows to table 'predictions' in new.duckdb" in out
    assert "(total weight 4000)" in out
    # a previous demo may be replaced, and is, atomically
    inode = os.stat("new.duckdb").st_ino
    assert cli(capsys, "demo", "new.duckdb", "--rows", "1000")[0] == 0
    assert os.stat("new.duckdb").st_ino != inode
    assert not [p for p in os.listdir(".") if p.startswith(".sqlcal-demo")]


def test_help_lists_metric_names_and_dialects(capsys):
    code, out, _ = cli(capsys, "report", "--help")
    assert code == 0
    flat = " ".join(out.split())
    for name in METRICS:
        assert name in flat
    code, out, _ = cli(capsys, "sql", "--help")
    assert code == 0
    for name in sql_metrics():
        assert name in out
    assert "duckdb" in out and "postgres" in out and "oracle" not in out
