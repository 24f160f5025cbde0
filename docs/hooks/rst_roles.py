"""MkDocs hook: the reStructuredText of the numpydoc docstrings, read as plain text.

The docstrings follow numpydoc, whose cross-references (:func:`sqlcal.source`) and formulas
(:math:`W_k`, ``.. math::`` blocks) are reStructuredText; mkdocstrings renders the sections and
leaves those as text. In the rendered API pages a role becomes its code (a ``~`` keeps the last
name, as Sphinx shows it), and a ``.. math::`` paragraph a block of LaTeX source.
"""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|obj|exc|math|ref|doc):<code>(~?)([^<]*)</code>")
MATH_BLOCK = re.compile(r"<p>\.\. math::\s*(.*?)</p>", re.S)


def on_page_content(html: str, page, config, files) -> str:
    if not page.file.src_uri.startswith("api/"):
        return html
    html = ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>",
                    html)
    return MATH_BLOCK.sub(lambda m: f"<pre><code>{m.group(1).strip()}</code></pre>", html)
