"""The documentation site builds strictly, documents every public name, and the README and the
pages keep to what a user's documentation holds.

``mkdocs build --strict`` fails on any warning: a broken link or anchor, a page missing from the
navigation, an API reference that names nothing, a docstring mkdocstrings cannot parse. Without
mkdocs (the ``docs`` extra, part of ``test``) the build is skipped with the reason printed, or
fails under ``SQLCAL_STRICT_ENGINES=1`` as a missing engine does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sqlcal
from tests.conftest import engine_missing

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
PLOTS = ["reliability_diagram", "smooth_reliability_diagram", "tce_diagram", "cumulative_plot"]


def test_site_builds_strictly(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_jupyter"):
        try:
            __import__(module)
        except ImportError as e:
            engine_missing(f"the docs build needs {module} ({e}): pip install '.[docs]'")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    # the API reference rendered each public name from its docstring
    api = "".join(p.read_text() for p in (site / "api").rglob("index.html"))
    for name in [*sqlcal.__all__, *(f"plots.{n}" for n in PLOTS)]:
        assert f'id="sqlcal.{name}"' in api, name
    # numpydoc's See Also and References (one paragraph each in mkdocstrings) render as a list of
    # linked names and a paragraph per reference (docs/hooks/rst_roles.py)
    metrics = (site / "api" / "metrics" / "index.html").read_text()
    ece = metrics[metrics.index('id="sqlcal.ece"'):metrics.index('id="sqlcal.reliability"')]
    assert '<a href="#sqlcal.reliability"><code>reliability</code></a>: ' in ece
    assert "<p>[1] C. Guo, G. Pleiss" in ece
    assert ".. [" not in api
    for page in (site / "api").rglob("index.html"):
        for block in re.findall(r'<details class="see-also".*?</details>', page.read_text(), re.S):
            assert "<li>" in block and "<p>" not in block, block
            for href in re.findall(r"<li>.*?</li>", block):
                m = re.match(r'<li><a href="([^"#]*)#([^"]+)">', href)
                assert m, f"{page}: a See Also name without a link: {href}"
                target = (page.parent / m[1] / "index.html") if m[1] else page
                assert f'id="{m[2]}"' in target.resolve().read_text(), (page, href)
    # the command line page is the parser's own help, generated at build time
    cli = (site / "guide" / "cli" / "index.html").read_text()
    assert "usage: sqlcal report" in cli and "--negative-sampling-rate" in cli
    assert "sqlcal-help" not in cli
    # the notebooks are pages, with their saved outputs
    for name in ("quickstart", "choosing_a_metric", "monitoring", "segments"):
        assert (site / "notebooks" / name / "index.html").is_file(), name


def test_api_reference_names_every_public_function_by_its_public_path():
    # ::: sqlcal.ece, not the module that defines it today: the pages survive a move
    text = "".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    named = re.findall(r"^::: (\S+)$", text, re.M)
    want = [f"sqlcal.{n}" for n in sqlcal.__all__] + [f"sqlcal.plots.{n}" for n in PLOTS]
    assert sorted(named) == sorted(want)


def test_readme_is_short_and_points_into_the_repository():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(([^)]+)\)", text)
    outside = [link for link in links if "://" in link or link.startswith(("..", "/"))]
    assert outside == []
    missing = [link for link in links if not (ROOT / link.split("#")[0]).exists()]
    assert missing == []


@pytest.mark.parametrize("path", [ROOT / "README.md", ROOT / "CHANGELOG.md",
                                  ROOT / "bench" / "README.md", *PAGES],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_name_no_issue_spec_or_outside_path(path):
    text = path.read_text()
    assert not re.search(r"\bissues? #?\d+|\bthe spec\b|spec's|\.\./shared|shared/spec",
                         text, re.I), path
    # a commit is no date stamp for a measurement: the command that made it is
    assert not re.search(r"\b(at|commit|code of) [0-9a-f]{7}\b", text), path
