"""MkDocs hook: the reStructuredText of the numpydoc docstrings, read as plain text.

The docstrings follow numpydoc, whose cross-references (:func:`sqlcal.source`) and formulas
(:math:`W_k`, ``.. math::`` blocks) are reStructuredText; mkdocstrings renders the sections and
leaves those as text. In the rendered API pages a role becomes its code (a ``~`` keeps the last
name, as Sphinx shows it), and a ``.. math::`` paragraph a block of LaTeX source.

mkdocstrings renders the numpydoc sections it does not parse (See Also, References) as
admonitions holding one paragraph, their entries run together. A See Also entry
(``name : phrase``) becomes a list item whose name links to the name's heading in the API
reference; a References entry (``.. [1] A. Author, "Title", Venue, Year.``) a paragraph of its
own, numbered [1].
"""

from __future__ import annotations

import re
from pathlib import Path

ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|obj|exc|math|ref|doc)"
                  r":<code>(~?)([^<]*)</code>")
MATH_BLOCK = re.compile(r"<p>\.\. math::\s*(.*?)</p>", re.S)
SEE_ALSO = re.compile(
    r'(<details class="see-also"[^>]*>\s*<summary>[^<]*</summary>\s*)<p>(.*?)</p>', re.S)
SEE_ALSO_ENTRY = re.compile(r"^([\w.]+(?:, [\w.]+)*) : ", re.M)
REFERENCES = re.compile(
    r'(<details class="references"[^>]*>\s*<summary>[^<]*</summary>\s*)<p>(.*?)</p>', re.S)
REFERENCE_ENTRY = re.compile(r"^\.\. \[(\d+)\] ", re.M)
API_NAME = re.compile(r"^::: (\S+)$", re.M)


def on_page_content(html: str, page, config, files) -> str:
    if not page.file.src_uri.startswith("api/"):
        return html
    def role(m: re.Match) -> str:  # ~name shows its last part only, as Sphinx does
        return f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>"

    html = ROLE.sub(role, html)
    html = MATH_BLOCK.sub(lambda m: f"<pre><code>{m.group(1).strip()}</code></pre>", html)
    headings = _api_headings(config["docs_dir"])
    html = SEE_ALSO.sub(lambda m: m.group(1) + _see_also(m.group(2), headings, page, files), html)
    return REFERENCES.sub(lambda m: m.group(1) + _references(m.group(2)), html)


def _see_also(text: str, headings: dict[str, str], page, files) -> str:
    """One list item per ``name : phrase`` entry, each name linked to its heading."""
    entries = _entries(SEE_ALSO_ENTRY, text)
    if not entries:
        return f"<p>{text}</p>"
    items = []
    for head, phrase in entries:
        names = ", ".join(_link(n, headings, page, files) for n in head.split(", "))
        items.append(f"<li>{names}: {phrase}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _link(name: str, headings: dict[str, str], page, files) -> str:
    """``name`` as code, linked to the API page that documents it (names resolve as numpydoc's
    See Also does: in sqlcal, then in sqlcal.plots)."""
    for ident in (name, f"sqlcal.{name}", f"sqlcal.plots.{name}"):
        if ident in headings:
            target = files.get_file_from_path(headings[ident])
            href = "" if target is page.file else target.url_relative_to(page.file)
            return f'<a href="{href}#{ident}"><code>{name}</code></a>'
    return f"<code>{name}</code>"


def _references(text: str) -> str:
    """One paragraph per ``.. [n]`` entry, numbered as the docstring numbers it."""
    entries = _entries(REFERENCE_ENTRY, text)
    if not entries:
        return f"<p>{text}</p>"
    return "".join(f"<p>[{number}] {body}</p>" for number, body in entries)


def _entries(start: re.Pattern, text: str) -> list[tuple[str, str]]:
    """(the start's group, the text up to the next start with its whitespace collapsed)."""
    starts = list(start.finditer(text))
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return [(m.group(1), " ".join(text[m.end():end].split())) for m, end in zip(starts, ends)]


def _api_headings(docs_dir: str) -> dict[str, str]:
    """Each name the API reference renders (``::: sqlcal.ece``) -> the page that renders it."""
    return {name: page.relative_to(docs_dir).as_posix()
            for page in sorted(Path(docs_dir, "api").glob("*.md"))
            for name in API_NAME.findall(page.read_text(encoding="utf-8"))}
