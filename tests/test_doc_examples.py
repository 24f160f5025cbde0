"""Every example of README.md and docs/ runs as written, on the data ``sqlcal demo --examples``
writes.

Each page runs in a folder of its own holding ``demo.duckdb`` and the example files, its code
blocks in order and in one namespace (as a reader pastes them):

- a ``python`` block with ``>>>`` prompts is a doctest: its printed output is checked
  (``...`` matches anything, whitespace is normalised);
- any other ``python`` block is executed;
- a ``bash``/``console``/``shell`` block runs its ``sqlcal ...`` commands (the CLI in this
  process, exit code 0, or 3 where an alert fires, which is the command doing its job); a
  ``text`` block right after it is the output shown, checked as a doctest's is. Other commands
  (``pip``, ``pytest``, ``python bench/...``, ``dbt``) are not run: the test prints them;
- a block right after a line ``<!-- not run: REASON -->`` (an engine or service that is not
  here, such as BigQuery) is not run, and the test prints it with its reason.

Blocks in other languages (``toml``, ``yaml``, ``sql``, ``text``) are files or output, not
commands. ``docs/hooks`` and generated pages are not examples.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>.+?) -->\s*$")
SHELL = {"bash", "sh", "shell", "console"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
NOT_RUN_LOG: list[str] = []


@dataclass
class Block:
    lang: str
    body: str
    line: int
    skip: str | None  # the reason it is not run
    output: str | None = None  # the text block right after a shell block


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, with their not-run markers and shown output."""
    out: list[Block] = []
    previous_end = 0
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        lang = match.group("lang").lower()
        block = Block(lang, match.group("body"), text.count("\n", 0, match.start()) + 1,
                      marker.group("reason") if marker else None)
        between = text[previous_end:match.start()]
        if lang == "text" and out and out[-1].lang in SHELL and not between.strip():
            out[-1].output = block.body
        else:
            out.append(block)
        previous_end = match.end()
    return out


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory) -> Path:
    """``sqlcal demo --examples`` once: each page gets a copy."""
    from sqlcal.cli.commands import main

    folder = tmp_path_factory.mktemp("examples")
    here = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["demo", "--examples"]) == 0
    finally:
        os.chdir(here)
    return folder


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_examples_run_as_written(page, example_folder, tmp_path, monkeypatch):
    for item in example_folder.iterdir():
        shutil.copy(item, tmp_path / item.name)
    # the pages name the repository's example configs as examples/... (run from its root)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    namespace: dict = {"__name__": "__main__"}
    where = _page_id(page)
    for block in blocks(page.read_text()):
        place = f"{where}:{block.line}"
        if block.lang not in {"python", *SHELL}:
            continue
        if block.skip:
            _not_run(place, block.body, block.skip)
        elif block.lang == "python" and re.search(r"^\s*>>> ", block.body, re.M):
            _doctest(block.body, namespace, place)
        elif block.lang == "python":
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(block.body, place, "exec"), namespace)
        else:
            _shell(block, place)


@pytest.fixture(scope="module", autouse=True)
def _print_not_run():
    yield
    if NOT_RUN_LOG:
        print("\nexamples not run by tests/test_doc_examples.py:")
        print("\n".join(NOT_RUN_LOG))


def _doctest(body: str, namespace: dict, place: str) -> None:
    test = doctest.DocTestParser().get_doctest(body, namespace, place, place, 0)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    runner.run(test, out=report.write, clear_globs=False)
    namespace.update(test.globs)  # the DocTest ran on a copy: later blocks see its names
    if runner.failures:
        pytest.fail(f"{place}: the example's output differs\n{report.getvalue()}",
                    pytrace=False)


def _shell(block: Block, place: str) -> None:
    from sqlcal.cli.commands import main

    printed = io.StringIO()
    ran = 0
    for command in _commands(block.body):
        words = shlex.split(command, comments=True)
        if not words:
            continue
        if words[0] != "sqlcal":
            _not_run(place, command, "not a sqlcal command")
            continue
        ran += 1
        with contextlib.redirect_stdout(printed):
            try:
                code = main(words[1:])
            except SystemExit as e:  # --help, --version
                code = e.code
        assert code in (0, 3), f"{place}: {command!r} exited with {code}"
    if block.output is not None:
        assert ran, f"{place}: an output is shown but no sqlcal command runs"
        checker = doctest.OutputChecker()
        got = printed.getvalue()
        if not checker.check_output(block.output, got, FLAGS):
            pytest.fail(f"{place}: the output shown differs from the command's\n"
                        + checker.output_difference(doctest.Example("", block.output), got,
                                                    FLAGS), pytrace=False)


def _commands(body: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, ``&&`` chains split."""
    joined = re.sub(r"\\\n\s*", " ", body)
    out = []
    for line in joined.splitlines():
        if line.lstrip().startswith("$ "):
            line = line.lstrip()[2:]
        out += [part.strip() for part in line.split("&&")]
    return [c for c in out if c and not c.startswith("#")]


def _not_run(place: str, body: str, reason: str) -> None:
    first = body.strip().splitlines()[0] if body.strip() else ""
    NOT_RUN_LOG.append(f"  {place}: {first[:70]} ({reason})")


def test_every_page_has_a_runnable_example_or_none_at_all():
    # a marker must sit right before a block: one left dangling would silently stop nothing
    for page in PAGES:
        text = page.read_text()
        markers = len(re.findall(r"<!-- not run: .+? -->", text))
        marked = sum(1 for b in blocks(text) if b.skip)
        assert markers == marked, f"{_page_id(page)}: a not-run marker is not right before a block"
