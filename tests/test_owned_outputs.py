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
import time
from pathlib import Path

import pytest

from sqlcal import outputs
from sqlcal.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_a_fifo_output_is_refused_before_it_is_opened(tmp_path, monkeypatch):
    """Opening a FIFO for reading blocks until a writer comes: the check must not open it."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo("r.json")
    code = f"""
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
