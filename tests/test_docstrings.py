"""Docstrings for users: every public function documents its parameters, result and an example.

Checks every callable in ``sqlcal.__all__`` and every public function of ``sqlcal.plots``: a
numpydoc docstring with Parameters, Returns (or Yields) and Examples sections, every parameter of
the signature named in Parameters, the sections in numpydoc's order, and a See Also section whose
entries are public names; every registered metric cites its papers in a References section. The
examples themselves run as doctests (``--doctest-modules``).
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
from sqlcal.metrics._registry import registered

SECTION = re.compile(r"^(?P<name>[A-Z][A-Za-z ]+)\n-{3,}\s*$", re.M)
INTERNAL = re.compile(r"seed00\d|§|spec/|DESIGN\.md")
# numpydoc's section order (those sqlcal's public docstrings use)
ORDER = ["Parameters", "Attributes", "Returns", "Yields", "Raises", "See Also", "Notes",
         "References", "Examples"]
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


def _see_also(body: str) -> list[str]:
    """Names listed in a See Also body: unindented lines ``name : phrase`` or ``a, b : phrase``."""
    names = []
    for line in body.splitlines():
        if line and not line[0].isspace():
            names += [n.strip() for n in line.split(" :", 1)[0].split(",") if n.strip()]
    return names


def _resolves(name: str, where: str) -> bool:
    """A See Also name is public, read as numpydoc reads it: relative to the documented object's
    module (``sqlcal`` or ``sqlcal.plots``), or in full."""
    plot_names = {n.split(".", 1)[1] for n, _ in PUBLIC if n.startswith("plots.")}
    name = name.removeprefix("sqlcal.")
    if name.startswith("plots."):
        return name.split(".", 1)[1] in plot_names
    return name in sqlcal.__all__ or (where.startswith("plots.") and name in plot_names)


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


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_sections_in_numpydoc_order(name, obj):
    present = list(_sections(inspect.getdoc(obj)))
    unknown = [s for s in present if s not in ORDER]
    assert not unknown, f"{name}: sections {unknown} are not numpydoc's"
    assert present == sorted(present, key=ORDER.index), (
        f"{name}: sections {present}, numpydoc's order is {[s for s in ORDER if s in present]}")


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_see_also_names_public_neighbours(name, obj):
    sections = _sections(inspect.getdoc(obj))
    assert "See Also" in sections, f"{name}: no See Also section"
    names = _see_also(sections["See Also"])
    assert 1 <= len(names) <= 4, f"{name}: See Also lists {len(names)} names, not 1 to 4"
    unknown = [n for n in names if not _resolves(n, name)]
    assert not unknown, f"{name}: See Also names {unknown}, which are not public"
    assert name.removeprefix("plots.") not in {n.rsplit(".", 1)[-1] for n in names}, (
        f"{name}: See Also names itself")
    bare = [line for line in sections["See Also"].splitlines()
            if line and not line[0].isspace() and " : " not in line]
    assert not bare, f"{name}: See Also entries without a phrase saying when to use them: {bare}"


@pytest.mark.parametrize("name", sorted(registered()))
def test_registered_metrics_cite_their_papers(name):
    doc = inspect.getdoc(registered()[name].function)
    body = _sections(doc).get("References")
    assert body, f"{name}: a registered metric without a References section"
    numbers = [int(n) for n in re.findall(r"^\.\. \[(\d+)\] ", body, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and numbers, (
        f"{name}: References entries are not '.. [1] ', '.. [2] ', ... in turn: {numbers}")
    entries = re.split(r"^\.\. \[\d+\] ", body, flags=re.M)[1:]
    for entry in (" ".join(e.split()) for e in entries):
        # authors, "Title", venue, year: the numpydoc form
        assert re.fullmatch(r'[^"]+, "[^"]+", .+, (1[89]|20)\d\d\.', entry), (
            f"{name}: reference not in the form 'A. Author, \"Title\", Venue, Year.': {entry!r}")


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
    see = ("ece : the L1 form.\nks, kuiper : tests on\n    the running sum.\n"
           "plots.tce_diagram : draws.\n")
    assert _see_also(see) == ["ece", "ks", "kuiper", "plots.tce_diagram"]
    assert _resolves("sqlcal.plots.tce_diagram", "ece") and _resolves("tce_diagram", "plots.x")
    assert not _resolves("tce_diagram", "ece") and not _resolves("rmsce", "ece")
