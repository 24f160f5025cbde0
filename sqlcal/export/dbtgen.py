"""The dbt package ``sqlcal`` (``sql/dbt/``), generated from the statements the library runs.

Each summary's macro holds the SQL that :func:`sqlcal.export.metric_sql.statements` writes for a
relation of ``(by..., score, label, weight)`` columns, transpiled by Ibis/sqlglot for every dialect
of ``sql/`` and picked by ``adapter.dispatch`` (``default__`` is PostgreSQL's text; an adapter gets
its own macro where its SQL differs). The group keys and the bin / cell counts are Jinja parameters;
nothing else is written by hand. The generic test ``sqlcal.calibration`` finishes the totals, binned
and score-cell metrics from those summaries in SQL, with the formulas of the library's finishes
(:mod:`sqlcal.metrics.scores`, :mod:`sqlcal.metrics.binned`, :mod:`sqlcal.metrics.cumulative`), and
returns one row per group that fails.

``python -m sqlcal.export.dbtgen`` (or ``sqlcal dbt FOLDER``) rewrites ``sql/dbt/`` through sqlcal's
one writer (:func:`sqlcal.outputs.write_folder`: only into a folder sqlcal owns, every file marked,
a manifest of what it wrote); a test fails when the files drift from the code.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from importlib import resources
from pathlib import Path

import ibis

from sqlcal import outputs
from sqlcal.export.metric_sql import statements
from sqlcal.inputs.groupkeys import VALUE
from sqlcal.inputs.sources import check_exprs, valid_expr
from sqlcal.metrics.intervals import z_value
from sqlcal.monitor import schema
from sqlcal.query import reductions
from sqlcal.query.sql import to_sql

#: dbt adapter -> the Ibis dialect of its SQL ("spark" covers Databricks, whose adapter dispatches
#: to spark__ macros); PostgreSQL's text is the default__ macro
ADAPTERS = {"postgres": "postgres", "duckdb": "duckdb", "spark": "databricks",
            "bigquery": "bigquery", "snowflake": "snowflake", "trino": "trino"}
DEFAULT = "postgres"
#: the relation and group-key placeholders the statements are compiled with
_RELATION, _BY = "sqlcal_rows", "sqlcal_by__"
#: placeholder counts (occur nowhere else in the statements), replaced by Jinja parameters
_BINS, _CELLS = 977, 1 << 20
#: summary macro -> (the metrics whose statements it unites, its Jinja parameter, placeholder)
SUMMARIES = {
    "totals": ({"brier": {}, "log_loss": {}, "calibration_in_the_large": {},
                "spiegelhalter": {}}, None, None),
    "uniform_bins": ({m: {"bins": _BINS} for m in ("ece", "reliability", "brier_decomposition")},
                     "bins", _BINS),
    "score_cells": ({m: {"method": "grid", "cells": _CELLS} for m in ("cutoff_error", "kuiper",
                                                                        "ks")}, "cells", _CELLS),
    "logit_grid": ({"ls_ece": {}}, None, None),
    "levels": ({"cutoff_error": {}}, None, None),
}
#: the metrics of the generic test sqlcal.calibration -> the summary it finishes from
TEST_METRICS = {"ece": "uniform_bins", "mce": "uniform_bins", "citl": "totals",
                "brier": "totals", "log_loss": "totals", "spiegelhalter_z": "totals",
                "cutoff_error": "score_cells"}


#: the two-sided normal quantiles of the confidence levels the delta-method intervals of
#: ``calibration_values`` (brier, log_loss, citl) take (SQL has no normal quantile function)
LEVELS = {str(c): z_value(c) for c in (0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)}


#: what the generic test can detect: per group, the rows at which it fails a model whose true
#: log-odds are its own plus 0.3 (``shift``) in 90% of fresh samples (confidence 0.9), for two
#: score distributions (log-odds N(-1.2, 1.3), mean score 0.28; N(0, 1.3), centred on 0.5);
#: ``cutoff_even`` and ``cutoff_90`` are the cutoff error's rows times (ε − max)². Derived in
#: the README text below; tests/test_dbt_power.py recomputes every figure by simulation.
DETECTION = {"shift": 0.3, "cutoff_even": 504, "cutoff_90": 530, "cutoff_at_0.08": 79_000,
             "cutoff_shift_skewed": 217_000, "spiegelhalter_skewed": 1_800,
             "spiegelhalter_centred": 175_000, "spiegelhalter_centred_at_30000": 27,
             "citl_skewed": 330, "citl_centred": 240}


def summary_sql(kind: str, dialect: str, weighted: bool) -> str:
    """One summary's statement for ``dialect``, with Jinja for the relation (``relation``), the
    group keys (``by``, a list of column names) and the bin or cell count.

    Parameters
    ----------
    kind : str
        A key of :data:`SUMMARIES` (``"totals"``, ``"uniform_bins"``, ``"score_cells"``,
        ``"logit_grid"``, ``"levels"``).
    dialect : str
        An Ibis dialect (``"duckdb"``, ``"postgres"``, ``"databricks"``, ...).
    weighted : bool
        The statement of a relation whose ``weight`` column weights the rows (else every row
        weighs 1 and the weight checks are left out, as in :func:`sqlcal.summary_sql`).

    Returns
    -------
    str
        The body of a dbt macro taking ``relation``, ``by`` and, for the binned summaries,
        ``bins`` or ``cells``.

    Examples
    --------
    >>> text = summary_sql("totals", "duckdb", weighted=True)
    >>> "{{ relation }}" in text and "{%- for c in by %}" in text
    True
    """
    metrics, param, placeholder = SUMMARIES[kind]
    if kind == "validation":
        raise ValueError("the validation counts come from validation_sql")
    (text,) = statements(metrics, dialect=dialect, table=_RELATION, score="score",
                         label="label", weight="weight" if weighted else None,
                         by=(_BY,), internal_keys=True).values()
    return _template(_plain_key(text, dialect), dialect, param, placeholder)


def validation_sql(dialect: str, weighted: bool) -> str:
    """The per-group validation counts (``sql/<dialect>/validation.sql``) as a Jinja template.

    Parameters
    ----------
    dialect : str
        An Ibis dialect.
    weighted : bool
        Whether the relation's ``weight`` column weights the rows (and is checked).

    Returns
    -------
    str
        The body of a dbt macro taking ``relation`` and ``by``: per group ``n_rows``, the count
        of rows failing each check (``score_null``, ``label_range``, ...) and ``n`` valid rows.

    Examples
    --------
    >>> "score_null" in validation_sql("postgres", weighted=False)
    True
    """
    schema = {_BY: "string", "score": "float64", "label": "float64", "weight": "float64"}
    t = ibis.table(schema, name=_RELATION)
    rows = t.select(_BY, p=t.score, y=t.label, w=t.weight if weighted else ibis.literal(1.0))
    expr = reductions.validation(rows, (_BY,), check_exprs(rows, weighted),
                                valid_expr(rows, weighted, False))
    return _template(to_sql(expr, dialect), dialect, None, None)


def store_sql(kind: str, dialect: str) -> str:
    """The rows a snapshot stores for one summary kind (:data:`sqlcal.monitor.schema.TABLES`:
    ``"totals"``, ``"cells"`` or ``"bins"``), as a Jinja template over a relation of ``(by...,
    p, y, w, period_start)``: per group, period and key, the label-free row (``delay`` = -1,
    over every row) and the label row of the positives (``delay`` = -2: arrival unknown): the
    store's sums as declared once (:data:`sqlcal.query.declared.STORE_SUMS`), rendered by
    :func:`sqlcal.query.reductions.store_rows` as the snapshot's query renders them.

    Examples
    --------
    >>> "{{ cells - 1 }}" in store_sql("cells", "duckdb")
    True
    """
    t = ibis.table({_BY: "string", "p": "float64", "y": "float64", "w": "float64",
                    "period_start": "timestamp"}, name=_RELATION)
    expr = reductions.store_rows(t, [_BY, "period_start"], kind, cells=_CELLS, bins=_BINS,
                                 free_delay=schema.DELAY_LABEL_FREE,
                                 label_delay=schema.DELAY_UNKNOWN)
    param, placeholder = {"cells": ("cells", _CELLS), "bins": ("bins", _BINS)}.get(kind,
                                                                             (None, None))
    return _template(to_sql(expr, dialect), dialect, param, placeholder)


def _plain_key(text: str, dialect: str) -> str:
    """A statement whose group key keeps its internal name (``__key0``,
    :mod:`sqlcal.inputs.groupkeys`) with the key under its own name throughout, as the template
    finds it (the placeholder is named like no column of sqlcal's)."""
    q = "`" if dialect in ("bigquery", "databricks") else '"'
    key = re.escape(q + _BY + q)
    text = text.replace(q + VALUE.format(0) + q, q + _BY + q)
    return re.sub(rf"(\S*{key}) AS {key}", r"\1", text)


def _template(text: str, dialect: str, param: str | None, placeholder: int | None) -> str:
    q = "`" if dialect in ("bigquery", "databricks") else '"'
    text = text.strip().rstrip(";")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    if "{{" in text or "{%" in text or "{#" in text:
        raise ValueError("a statement holds Jinja delimiters")
    text = text.replace(f"{q}{_RELATION}{q}", "{{ relation }}")
    by = re.compile(rf"^(\s*)(\S*){re.escape(q + _BY + q)},$", re.M)
    if len(by.findall(text)) < 2:
        raise ValueError(f"{dialect}: the group key is not where the template expects it")
    # one line per group key; the caller's keys are quoted as the adapter quotes
    text = by.sub(lambda m: ("{%- for c in by %}\n" + m.group(1) + m.group(2)
                             + "{{ adapter.quote(c) }},\n{%- endfor %}"), text)
    group = re.compile(r"^(\s*)GROUP BY\n((?:\s*\d+,?\n?)+)", re.M)
    if not group.search(text):
        raise ValueError(f"{dialect}: no GROUP BY ordinals")
    text = group.sub(_group_by, text)
    if placeholder is not None:
        found = text.count(str(placeholder))
        if found == 0 or text.count(str(placeholder - 1)) != found:
            raise ValueError(f"{dialect}: the {param} placeholder is not where expected")
        text = text.replace(str(placeholder - 1), "{{ " + param + " - 1 }}")
        text = text.replace(str(placeholder), "{{ " + param + " }}")
    if _BY in text:
        raise ValueError(f"{dialect}: a group key placeholder is left")
    return text + "\n"


def _group_by(m: re.Match) -> str:
    """GROUP BY 1[, 2, ...] with key 1 the group placeholder: the caller's keys' ordinals, then
    the summary's own keys shifted (no GROUP BY when neither is left)."""
    indent = m.group(1)
    ordinals = [int(x) for x in re.findall(r"\d+", m.group(2))]
    if ordinals[0] != 1 or ordinals != list(range(1, len(ordinals) + 1)):
        raise ValueError("the group key is not the first GROUP BY ordinal")
    own = ", ".join(f"{{{{ by | length + {i - 1} }}}}" for i in ordinals[1:])
    keys = "{% for c in by %}{{ loop.index }}{{ ', ' if not loop.last }}{% endfor %}"
    if own:
        return (f"{indent}GROUP BY\n{indent}  {keys}{{{{ ', ' if by }}}}{own}\n")
    return "{%- if by %}\n" + f"{indent}GROUP BY\n{indent}  {keys}\n" + "{%- endif %}\n"


def _macro(name: str, args: str, calls: str, bodies: dict[str, str]) -> str:
    out = [f"{{% macro {name}({args}) %}}\n"
           f"  {{{{ return(adapter.dispatch('{name}', 'sqlcal')({calls})) }}}}\n"
           "{% endmacro %}\n"]
    default = bodies[DEFAULT]
    for adapter, text in bodies.items():
        if adapter == DEFAULT or text != default:
            prefix = "default" if adapter == DEFAULT else adapter
            out.append(f"\n{{% macro {prefix}__{name}({calls}) %}}\n{text}{{% endmacro %}}\n")
    return "".join(out)


def _weighted_body(kind: str, dialect: str) -> str:
    make = validation_sql if kind == "validation" else (
        lambda d, w: summary_sql(kind, d, w))
    return ("{%- if weighted %}\n" + make(dialect, True) + "{%- else %}\n"
            + make(dialect, False) + "{%- endif %}\n")


@functools.lru_cache(maxsize=1)
def summaries_file() -> str:
    """``macros/summaries.sql``: one dispatched macro per summary (``summary_validation``,
    ``summary_totals``, ...), with a ``default__`` variant (PostgreSQL's SQL) and one per adapter
    whose SQL differs.

    Examples
    --------
    >>> text = summaries_file()
    >>> "{% macro summary_uniform_bins(relation, by=[], bins=15, weighted=true) %}" in text
    True
    >>> "{% macro bigquery__summary_totals(relation, by, weighted) %}" in text
    True
    """
    out = [_HEADER]
    for kind in ("validation", *SUMMARIES):
        param = SUMMARIES[kind][1] if kind in SUMMARIES else None
        default = {"bins": 15, "cells": 1024}.get(param)
        args = "relation, by=[], " + (f"{param}={default}, " if param else "") + "weighted=true"
        calls = "relation, by, " + (f"{param}, " if param else "") + "weighted"
        out.append(f"\n{{# {_DOCS[kind]} #}}\n")
        out.append(_macro(f"summary_{kind}", args, calls,
                          {a: _weighted_body(kind, d) for a, d in ADAPTERS.items()}))
    return "".join(out)


@functools.lru_cache(maxsize=1)
def store_file() -> str:
    """``macros/store.sql``: the summary store's tables (:mod:`sqlcal.monitor.schema`) as model
    macros: ``store_rows(kind, ...)`` for ``sqlcal_sum_totals``, ``_cells`` and ``_bins``, and
    ``store_manifest(...)`` for ``sqlcal_snapshots``, which :func:`sqlcal.stored` reads.

    Examples
    --------
    >>> "{% macro store_manifest(" in store_file()
    True
    """
    out = [_HEADER]
    for kind in ("totals", "cells", "bins"):
        param = {"cells": "cells", "bins": "bins"}.get(kind)
        args = "relation, by=[]" + (f", {param}=none" if param else "")
        calls = "relation, by" + (f", {param}" if param else "")
        out.append(f"\n{{# stored rows of sqlcal_sum_{kind}, before the leading columns #}}\n")
        out.append(_macro(f"store_{kind}", args, calls,
                          {a: store_sql(kind, d) for a, d in ADAPTERS.items()}))
    columns = {kind: [c for c, _ in (*schema.TABLES[kind]["keys"],
                                     *schema.TABLES[kind]["values"])]
               for kind in ("totals", "cells", "bins")}
    out.append(_text("store.sql").replace("__COLUMNS__", repr(columns)).replace(
        "__DELAYS__", repr([float(d) for d in schema.DELAYS])).replace(
        "__SUMMARY_VERSION__", str(schema.SUMMARY_VERSION)).replace(
        "__HASHED_VERSION__", str(schema.EXTENDS.get(schema.SUMMARY_VERSION,
                                                     schema.SUMMARY_VERSION))).replace(
        "__VERSION__", __import__("sqlcal").__version__))
    return "".join(out)


def render() -> dict[str, str]:
    """The generated package: path under ``sql/dbt/`` -> its text.

    Examples
    --------
    >>> sorted(render())  # doctest: +NORMALIZE_WHITESPACE
    ['README.md', 'dbt_project.yml', 'macros/calibration.sql', 'macros/calibration_change.sql',
     'macros/sqlcal.yml', 'macros/store.sql', 'macros/summaries.sql']
    """
    metrics = "{" + ", ".join(f'"{m}": "{s}"' for m, s in TEST_METRICS.items()) + "}"
    return {"dbt_project.yml": _text("dbt_project.yml"),
            "macros/summaries.sql": summaries_file(),
            "macros/calibration.sql": _HEADER + _text("calibration.sql").replace(
                "__METRICS__", metrics).replace("__Z__", repr(LEVELS)),
            "macros/calibration_change.sql": _HEADER + _text("calibration_change.sql"),
            "macros/store.sql": store_file(),
            "macros/sqlcal.yml": _text("sqlcal.yml").format(**_figures()),
            "README.md": _text("README.md").format(**_figures())}


def _text(name: str) -> str:
    """A hand-written part of the package, kept as a file in ``sqlcal/export/templates/``:

    - ``calibration.sql``: the finishes of :mod:`sqlcal.metrics` (scores, binned, cumulative) in
      SQL over a summary grouped by the caller's keys: ``value`` is what the library reports
      (for cutoff_error, its lower confidence bound), and a group fails when |value| (citl,
      spiegelhalter_z) or value exceeds max, when its value is undefined (an infinite log loss),
      or when its rows fail the library's validation;
    - ``store.sql``: the summary store written by dbt models, the same tables and columns as
      :func:`sqlcal.snapshot` (:mod:`sqlcal.monitor.schema`), one version per period (a model
      materialized incremental with delete+insert on period_start rewrites it in place);
    - ``calibration_change.sql``: the change detector of :func:`sqlcal.detect` (the e-detector on
      per-day, per-bet-bin sums) over the store: the plug-in bets from RANGE window frames over
      the day index, the CUSUM recursion as a running sum minus its running minimum, the average
      over the plug-in windows as a log-mean-exp (the library's numbers to rounding);
    - ``dbt_project.yml``, ``sqlcal.yml`` (the macros' properties) and ``README.md``.
    """
    return (resources.files("sqlcal.export") / "templates" / name).read_text(encoding="utf-8")


def _figures() -> dict:
    # DETECTION as the texts print it ("{cutoff_even}" -> "504", thousands with commas)
    return {k.replace(".", "_"): (f"{v:,}" if isinstance(v, int) else f"{v:g}")
            for k, v in DETECTION.items()}


def write(root: str | Path) -> tuple[list[str], list[str]]:
    """Write the package into the folder ``root`` through sqlcal's one writer
    (:func:`sqlcal.outputs.write_folder`); returns (paths written, stale paths removed).

    ``root`` must be absent, empty, or a package sqlcal wrote (it holds
    :data:`sqlcal.outputs.MANIFEST`): a foreign dbt project, a symlink or a file of someone
    else's at one of the package's paths is refused with :class:`sqlcal.outputs.OutputError`
    before anything is written. A file an earlier sqlcal wrote there and no longer makes is
    removed only when the manifest lists it and it still carries sqlcal's mark.

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     written, removed = write(os.path.join(d, "pkg"))
    ...     [os.path.basename(p) for p in written], removed  # doctest: +NORMALIZE_WHITESPACE
    (['dbt_project.yml', 'summaries.sql', 'calibration.sql', 'calibration_change.sql',
      'store.sql', 'sqlcal.yml', 'README.md'], [])
    """
    return outputs.write_folder(root, render(), what="dbt package")


def main(argv: list[str] | None = None) -> int:
    """``python -m sqlcal.export.dbtgen [FOLDER]``: write the package (default: ``sql/dbt`` of the
    source tree); exit code 2 with one line when the folder is refused."""
    parser = argparse.ArgumentParser(
        prog="python -m sqlcal.export.dbtgen",
        description="Write the dbt package sqlcal (the generated sql/dbt/) into FOLDER: a new or "
                    "empty folder, or one sqlcal wrote (it holds " + outputs.MANIFEST + ").")
    parser.add_argument("folder", nargs="?", default=str(_SOURCE_TREE / "sql" / "dbt"),
                        help="where to write it (default: sql/dbt of the source tree)")
    args = parser.parse_args(argv)
    try:
        written, removed = write(args.folder)
    except outputs.OutputError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    for path in removed:
        print(f"removed {path} (no longer generated)")
    return 0


_SOURCE_TREE = Path(__file__).resolve().parents[2]

_HEADER = ("{# sqlcal: generated by `python -m sqlcal.export.dbtgen` from the statements the "
           "library runs; do not edit. #}\n")

_DOCS = {
    "validation": "per group: n_rows and the count of rows failing each validation check; "
                  "n valid rows",
    "totals": "per group: n, W, Σwy, Σwp, the Brier, log-loss and Spiegelhalter sums",
    "uniform_bins": "per group and equal-width bin LEAST(FLOOR(p·bins), bins − 1): n, W, Σwy, "
                    "Σwp and moments",
    "score_cells": "per group and score cell LEAST(FLOOR(p·cells), cells − 1): n, W, the "
                   "residual sums (total, positive) and Bernoulli variances",
    "logit_grid": "per group and node of LS-ECE's logit grid (σ = 0.1): linear-binned masses",
    "levels": "per group and distinct score: n, W, Σwy, Σwp, Σw², positives (the exact summary)",
}


if __name__ == "__main__":
    sys.exit(main())
