"""Docstrings for users: every public function documents its parameters, result and an example.

Checks every callable in ``sqlcal.__all__`` and every public function of ``sqlcal.plots``: a
numpydoc docstring with Parameters, Returns (or Yields) and Examples sections, every parameter of
the signature named in Parameters. The examples themselves run as doctests (``--doctest-modules``).
No docstring anywhere under ``sqlcal/`` cites the project's internal specification files: users
cannot read them; docstrings cite the papers.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import re

import pytest

import sqlcal

SECTION = re.compile(r"^(?P<name>[A-Z][A-Za-z ]+)\n-{3,}\s*$", re.M)
INTERNAL = re.compile(r"seed00\d|§|spec/|DESIGN\.md")
PACKAGE = pathlib.Path(sqlcal.__file__).parent

# Docstrings still citing internal spec files: (module path relative to sqlcal/, qualified name
# or "<module>"). Keep it empty when possible.
INTERNAL_ALLOWED: set[tuple[str, str]] = set()


def _public() -> list[tuple[str, object]]:
    import sqlcal.plots as plots

    out = [(n, getattr(sqlcal, n)) for n in sqlcal.__all__ if callable(getattr(sqlcal, n))]
    out += [(f"plots.{n}", f) for n, f in sorted(vars(plots).items())
            if inspect.isfunction(f) and not n.startswith("_") and f.__module__ == plots.__name__]
    return out


def _sections(doc: str) -> dict[str, str]:
    """Section title -> body, from a dedented numpydoc docstring."""
    heads = list(SECTION.finditer(doc))
    return {m["name"].strip(): doc[m.end():(heads[i + 1].start() if i + 1 < len(heads) else None)]
            for i, m in enumerate(heads)}


def _documented(parameters: str) -> set[str]:
    """Names documented in a Parameters body: unindented lines ``name : type`` or ``a, b : type``."""
    names = set()
    for line in parameters.splitlines():
        if not line or line[0].isspace():
            continue
        head = line.split(" :", 1)[0]
        names |= {part.strip().lstrip("*") for part in head.split(",") if part.strip()}
    return names


def _signature_names(obj) -> list[str]:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin without a signature documents nothing to check
        return []
    return [n for n, p in sig.parameters.items() if not n.startswith("_") and n != "self"]


PUBLIC = _public()


def test_public_names_found():
    names = {n for n, _ in PUBLIC}
    assert {"ece", "cutoff_error", "source", "report", "plots.reliability_diagram"} <= names


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_numpydoc_sections(name, obj):
    doc = inspect.getdoc(obj)
    assert doc, f"{name} has no docstring"
    assert doc.splitlines()[0].strip(), f"{name}: the docstring starts with an empty summary line"
    sections = _sections(doc)
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        # an exception is raised, not called: a summary and an example of catching it suffice
        assert "Examples" in sections, f"{name}: no Examples section"
        return
    # a class documents its constructor's arguments as Parameters, or (a dataclass built by a
    # function, such as Source) its fields as Attributes
    params = "Parameters"
    if inspect.isclass(obj) and "Parameters" not in sections and "Attributes" in sections:
        params = "Attributes"
    missing = [s for s in (params, "Examples") if s not in sections]
    if not inspect.isclass(obj) and not ({"Returns", "Yields"} & set(sections)):
        missing.append("Returns")
    assert not missing, f"{name}: docstring lacks the section(s) {missing}"
    undocumented = [p for p in _signature_names(obj) if p not in _documented(sections[params])]
    assert not undocumented, (
        f"{name}: parameters {undocumented} of the signature are not in its {params} section")


def _docstrings(path: pathlib.Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree, clean=False)
    if doc:
        yield "<module>", doc

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                doc = ast.get_docstring(child, clean=False)
                if doc:
                    yield name, doc
                yield from walk(child, name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def test_no_internal_spec_citations():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for name, doc in _docstrings(path):
            if (rel, name) in INTERNAL_ALLOWED:
                continue
            for m in INTERNAL.finditer(doc):
                found.append(f"{rel}:{name}: ...{doc[max(0, m.start() - 30):m.end() + 30]!r}...")
    assert not found, ("docstrings cite internal spec files (cite the paper instead):\n"
                       + "\n".join(found))


def test_the_checks_catch_what_they_should():
    # the parsers on hand-made docstrings, so a check that silently finds nothing fails here
    doc = inspect.cleandoc('''Summary.

    Parameters
    ----------
    data : frame
        Rows.
    score, label : str
        Columns.
    **source_options
        Passed on.

    Returns
    -------
    DataFrame
    ''')
    sections = _sections(doc)
    assert set(sections) == {"Parameters", "Returns"}
    assert _documented(sections["Parameters"]) == {"data", "score", "label", "source_options"}
    assert INTERNAL.search("as in spec seed002 §2.2") and not INTERNAL.search("Guo et al. (2017)")
