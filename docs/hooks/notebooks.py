"""MkDocs hook: the notebooks of the repository's notebooks/ folder become pages of the site,
rendered with their saved outputs by mkdocs-jupyter (not executed at build time; the test suite
executes them, tests/test_notebooks.py)."""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns them into notebook pages
def on_files(files, config):
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        files.append(File(f"notebooks/{path.name}", src_dir=str(ROOT), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    return files
