"""What a newcomer reads first: ``sqlcal --help``, ``--version`` and the first report's output.

Every option explains itself, no help text shows reStructuredText markup, the exit codes listed
under a command are the ones that command returns, a flag that cannot apply to the source is an
error, and the default terminal table fits a terminal while ``--json`` keeps every column.
"""

from __future__ import annotations

import argparse
import json
import re

import pytest

import sqlcal
from sqlcal.cli.commands import _parser, main


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser, _ = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"sqlcal": parser, **sub.choices}


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    return capsys.readouterr().out


def test_version(capsys):
    assert _help(["--version"], capsys).strip() == f"sqlcal {sqlcal.__version__}"


def test_every_option_has_a_help_text():
    missing = [f"{name} {a.option_strings[0] if a.option_strings else a.dest}"
               for name, p in _commands().items() for a in p._actions
               if not isinstance(a, (argparse._HelpAction, argparse._VersionAction))
               and not (a.help or "").strip()]
    assert missing == []


def test_help_texts_are_plain_text(capsys):
    # argparse prints help verbatim: ``code``, :func:`x` and `x` would reach the terminal as is
    for name in _commands():
        text = _help(["--help"] if name == "sqlcal" else [name, "--help"], capsys)
        assert not re.search(r"``|:\w+:`|`[^`]+`", text), (name, text)


@pytest.mark.parametrize("command, alerts", [
    ("report", "alert"), ("monitor", "alarm"), ("snapshot", None), ("maturity", None),
    ("segments", "rejected"), ("sql", None), ("dbt", None), ("demo", None),
])
def test_exit_codes_are_those_of_the_command(command, alerts, capsys):
    text = _help([command, "--help"], capsys)
    assert "exit codes:" in text and "  0  " in text and "  2  " in text
    three = re.search(r"^  3  (.*)$", text, re.M)
    if alerts is None:
        assert three is None, text  # the command never returns 3
    else:
        assert three and alerts in three.group(1)


@pytest.mark.parametrize("kind", ["parquet", "csv", "folder", "glob"])
def test_table_with_a_file_source_is_an_error(tmp_path, capsys, kind):
    from sqlcal.cli.demo import demo_frame

    frame = demo_frame(rows=2000)
    folder = tmp_path / "preds"
    folder.mkdir()
    frame.to_parquet(folder / "part-0.parquet")
    frame.to_csv(tmp_path / "preds.csv", index=False)
    data = {"parquet": str(folder / "part-0.parquet"), "csv": str(tmp_path / "preds.csv"),
            "folder": str(folder), "glob": str(folder / "*.parquet")}[kind]
    code = main(["report", data, "--table", "predictions", "--score", "score", "--label",
                 "label"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "table=" in err and "predictions" in err
    with pytest.raises(sqlcal.InvalidInputError, match="table="):
        sqlcal.brier(data, table="predictions", score="score", label="label")
    # the same source without --table is measured
    assert main(["report", data, "--score", "score", "--label", "label",
                 "--metrics", "brier"]) == 0


def test_table_with_a_frame_is_an_error():
    from sqlcal.cli.demo import demo_frame

    with pytest.raises(sqlcal.InvalidInputError, match="table="):
        sqlcal.brier(demo_frame(rows=500), table="predictions", score="score", label="label")


def test_first_report_reads_in_a_terminal(tmp_path, capsys):
    db = str(tmp_path / "demo.duckdb")
    assert main(["demo", db, "--rows", "20000"]) == 0
    capsys.readouterr()
    argv = ["report", db, "--table", "predictions", "--score", "score", "--label", "label",
            "--weight", "weight", "--by", "model,segment"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert max(map(len, lines)) <= 120, printed
    # weights read as counts, values without exponents; only tiny p-values use them
    assert "e+" not in printed
    assert re.search(r"\b\d{1,3}(,\d{3})+\b|\b\d{3,}\b", printed)
    header = " ".join(line for line in lines if line.startswith("model"))
    for column in ("n", "W", "ece", "brier", "log_loss", "citl", "spiegelhalter_p", "hl_p",
                   "cutoff_error", "kuiper_p"):
        assert re.search(rf"(^|\s){column}(\s|$)", header), (column, header)
    assert "--json" in printed  # says where the other columns are
    # every group shows, and the ECE printed is the library's, rounded as shown
    assert sum(line.split()[:2] == ["v1", "ios"] for line in lines) >= 1
    want = sqlcal.ece(db, table="predictions", score="score", label="label", weight="weight",
                      by=["model", "segment"]).set_index(["model", "segment"]).ece
    row = next(line for line in lines if line.split()[:2] == ["v2", "web"])
    head = next(line for line in lines if line.startswith("model"))
    shown = row.split()[head.split().index("ece")]
    assert float(shown) == pytest.approx(want[("v2", "web")], abs=5e-5)  # four decimals

    # --json still carries every column of the report
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["columns"]) >= 27 and "cutoff_upper" in doc["columns"]


def test_install_hints_name_the_repository():
    # sqlcal is installed from its repository: a hint to install 'sqlcal[plot]' from an index
    # fails; every hint names the extra as the repository installs it
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    offending = [f"{path.relative_to(root)}:{i}" for path in sorted((root / "sqlcal").rglob("*.py"))
                 for i, line in enumerate(path.read_text().splitlines(), 1)
                 if "sqlcal[" in line]
    assert offending == []


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("demo") / "demo.duckdb")
    assert main(["demo", db, "--rows", "2000"]) == 0
    return db


@pytest.mark.parametrize("argv, flag", [
    (["--metrics", "brier,log_loss", "--bins", "10"], "--bins"),
])
def test_report_flag_no_metric_reads_is_an_error(demo_db, capsys, argv, flag):
    with pytest.raises(SystemExit) as e:
        main(["report", demo_db, "--table", "predictions", "--score", "score", "--label",
              "label", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and flag in err
    # with a metric that reads it, the flag is taken
    assert main(["report", demo_db, "--table", "predictions", "--score", "score", "--label",
                 "label", "--metrics", "brier,ece", "--bins", "10"]) == 0


def test_segments_sliceline_alpha_needs_its_effect(demo_db, capsys):
    argv = ["segments", demo_db, "--table", "predictions", "--score", "score", "--label",
            "label", "--features", "model"]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--sliceline-alpha", "0.9"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--sliceline-alpha" in err and "--effect sliceline" in err
    assert main([*argv, "--effect", "sliceline", "--sliceline-alpha", "0.9",
                 "--mode", "full"]) == 0
