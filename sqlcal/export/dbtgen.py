"""The dbt package ``sqlcal`` (``sql/dbt/``), generated from the statements the library runs.

Each summary's macro holds the SQL that :func:`sqlcal.export.metric_sql.statements` writes for a relation of
``(by..., score, label, weight)`` columns, transpiled by Ibis/sqlglot for every dialect of
``sql/`` and picked by ``adapter.dispatch`` (``default__`` is PostgreSQL's text; an adapter gets
its own macro where its SQL differs). The group keys and the bin / cell counts are Jinja
parameters; nothing else is written by hand. The generic test ``sqlcal.calibration`` finishes the
totals, binned and score-cell metrics from those summaries in SQL, with the formulas of the
library's finishes (:mod:`sqlcal.metrics.scores`, :mod:`sqlcal.metrics.binned`,
:mod:`sqlcal.metrics.cumulative`), and returns one row per group that fails.

``python -m sqlcal.export.dbtgen`` (or ``sqlcal dbt FOLDER``) rewrites ``sql/dbt/`` through sqlcal's one
writer (:func:`sqlcal.outputs.write_folder`: only into a folder sqlcal owns, every file marked,
a manifest of what it wrote); a test fails when the files drift from the code.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

import ibis

from sqlcal import outputs
from sqlcal.export.metric_sql import statements
from sqlcal.inputs.groupkeys import VALUE
from sqlcal.inputs.sources import check_exprs, valid_expr
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
    """A statement whose group key keeps its internal name (``__key0``, :mod:`sqlcal.inputs.groupkeys`)
    with the key under its own name throughout, as the template finds it (the placeholder is
    named like no column of sqlcal's)."""
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
                                     *schema.TABLES[kind]["label_free"],
                                     *schema.TABLES[kind]["label"])]
               for kind in ("totals", "cells", "bins")}
    out.append(_STORE.replace("__COLUMNS__", repr(columns)).replace(
        "__DELAYS__", repr([float(d) for d in schema.DELAYS])).replace(
        "__SUMMARY_VERSION__", str(schema.SUMMARY_VERSION)).replace(
        "__VERSION__", __import__("sqlcal").__version__))
    return "".join(out)


def render() -> dict[str, str]:
    """The generated package: path under ``sql/dbt/`` -> its text.

    Examples
    --------
    >>> sorted(render())
    ['README.md', 'dbt_project.yml', 'macros/calibration.sql', 'macros/calibration_change.sql', 'macros/sqlcal.yml', 'macros/store.sql', 'macros/summaries.sql']
    """
    return {"dbt_project.yml": _PROJECT, "macros/summaries.sql": summaries_file(),
            "macros/calibration.sql": _HEADER + _CALIBRATION,
            "macros/calibration_change.sql": _HEADER + _CHANGE, "macros/store.sql": store_file(),
            "macros/sqlcal.yml": _PROPERTIES.format(**_figures()),
            "README.md": _README.format(**_figures())}


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
    ...     [os.path.basename(p) for p in written], removed
    (['dbt_project.yml', 'summaries.sql', 'calibration.sql', 'calibration_change.sql', 'store.sql', 'sqlcal.yml', 'README.md'], [])
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

_HEADER = ("{# sqlcal: generated by `python -m sqlcal.export.dbtgen` from the statements the library runs;"
           " do not edit. #}\n")

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

_PROJECT = """\
# sqlcal: generated by `python -m sqlcal.export.dbtgen`; do not edit.
name: sqlcal
version: "0.1.0"
config-version: 2
require-dbt-version: [">=1.8.0", "<2.0.0"]
macro-paths: ["macros"]
"""

# The finishes of sqlcal.metrics (scores.py, binned.py, cumulative.py) in SQL, over a summary
# grouped by the caller's keys: `value` is what the library reports for the metric (for
# cutoff_error: its lower confidence bound), and a group fails when |value| (citl,
# spiegelhalter_z) or value exceeds max, when its value is undefined (an infinite log loss), or
# when its rows fail the library's validation (NULL or out-of-range scores, labels, weights).
_CALIBRATION = """
{#- The generic test: one row per group whose metric exceeds max. #}
{% test calibration(model, score, label, metric, max, weight=none, by=none, bins=15,
                    confidence=0.9, cells=1024) %}
{{ sqlcal.calibration_failures(model, score, label, metric, max, weight, by, bins, confidence,
                               cells) }}
{% endtest %}

{#- The metric per group (every group, with `failed`), for models and for the test. #}
{% macro calibration_values(model, score, label, metric, max=none, weight=none, by=none,
                            bins=15, confidence=0.9, cells=1024) %}
{%- set metrics = __METRICS__ %}
{%- if metric not in metrics %}
  {{ exceptions.raise_compiler_error("sqlcal.calibration: metric must be one of "
     ~ metrics | join(", ") ~ ", not " ~ metric) }}
{%- endif %}
{%- for name, value in [("bins", bins), ("cells", cells)] %}
  {%- if value is not number or value < 1 or value != value | int %}
  {{ exceptions.raise_compiler_error("sqlcal.calibration: " ~ name
     ~ " must be a positive integer, not " ~ value) }}
  {%- endif %}
{%- endfor %}
{%- if cells | int not in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
                          32768, 65536, 131072, 262144, 524288, 1048576] %}
  {{ exceptions.raise_compiler_error("sqlcal.calibration: cells must be a power of two up to "
     ~ "2^20, not " ~ cells) }}
{%- endif %}
{%- if confidence is not number or confidence <= 0 or confidence >= 1 %}
  {{ exceptions.raise_compiler_error("sqlcal.calibration: confidence must be in (0, 1), not "
     ~ confidence) }}
{%- endif %}
{%- if max is not none and max is not number %}
  {{ exceptions.raise_compiler_error("sqlcal.calibration: max must be a number, not " ~ max) }}
{%- endif %}
{%- set by = [] if by is none else ([by] if by is string else by) %}
{%- set q = adapter.quote %}
{%- set double = sqlcal.double() %}
{%- set keys %}{% for c in by %}{{ q(c) }}, {% endfor %}{% endset %}
{%- set group %}{% if by %} group by {% for c in by %}{{ q(c) }}{{ ", " if not loop.last }}{% endfor %}{% endif %}{% endset %}
with sqlcal_rows as (
  select
{%- for c in by %}
    {{ c }} as {{ q(c) }},
{%- endfor %}
    cast({{ score }} as {{ double }}) as {{ q("score") }},
    cast({{ label }} as {{ double }}) as {{ q("label") }},
    cast({{ weight if weight is not none else 1 }} as {{ double }}) as {{ q("weight") }}
  from {{ model }}
),
sqlcal_summary as (
{%- if metrics[metric] == "totals" %}
{{ sqlcal.summary_totals("sqlcal_rows", by) }}
{%- elif metrics[metric] == "uniform_bins" %}
{{ sqlcal.summary_uniform_bins("sqlcal_rows", by, bins | int) }}
{%- else %}
{{ sqlcal.summary_score_cells("sqlcal_rows", by, cells | int) }}
{%- endif %}
),
sqlcal_kind as (
  {#- sampling weights (Spiegelhalter, effective n) when any weight is not a whole number #}
  select case when sum({{ q("chk_w_frac") }}) > 0 then 1 else 0 end as {{ q("sampling") }}
  from sqlcal_summary
),
{%- if metric == "cutoff_error" %}
sqlcal_walk as (
  {#- S at each cell end: the running sum of Σw(y − p) in score order #}
  select s.*, sum({{ q("total") }}) over (
    {%- if by %} partition by {% for c in by %}{{ q(c) }}{{ ", " if not loop.last }}{% endfor %}{% endif %}
    order by {{ q("cell") }} rows between unbounded preceding and current row) as {{ q("s_end") }}
  from sqlcal_summary s
),
sqlcal_extremes as (
  select {{ keys }}
    sum({{ q("W") }}) as {{ q("W") }},
    sum({{ q("n") }}) as {{ q("n") }},
    sum({{ q("sw2") }}) as {{ q("sw2") }},
    (case when max({{ q("s_end") }}) > 0 then max({{ q("s_end") }}) else 0 end)
      - (case when min({{ q("s_end") }}) < 0 then min({{ q("s_end") }}) else 0 end)
      as {{ q("spread") }},
    {{ sqlcal._checks() }}
  from sqlcal_walk{{ group }}
),
sqlcal_value as (
  select e.*, case when {{ q("W") }} > 0 then {{ q("spread") }} / {{ q("W") }} end
    as {{ q("estimate") }},
    case when {{ q("sampling") }} = 1 then {{ q("W") }} * {{ q("W") }} / {{ q("sw2") }}
      else {{ q("W") }} end as {{ q("n_eff") }}
  from sqlcal_extremes e cross join sqlcal_kind
),
sqlcal_metric as (
  {#- the lower confidence bound: clip(Δ − (20 + √(2 ln(1/δ)))/√n, 0, 1), δ = (1 − confidence)/2 #}
  select {{ keys }} {{ q("n") }}, {{ q("W") }}, {{ q("problem") }},
    case when {{ q("n_eff") }} > 0 then
      greatest(least({{ q("estimate") }} - (20 + sqrt(2 * ln(1 / cast({{ (1 - confidence) / 2 }} as {{ double }}))))
                     / sqrt({{ q("n_eff") }}), 1), 0) end as {{ q("value") }}
  from sqlcal_value
)
{%- else %}
sqlcal_metric as (
  select {{ keys }}
    sum({{ q("n") }}) as {{ q("n") }},
    sum({{ q("W") }}) as {{ q("W") }},
    {{ sqlcal._checks() }},
{%- set W = 'sum(' ~ q("W") ~ ')' %}
{%- if metric == "ece" %}
    sum(case when {{ q("W") }} > 0 then abs({{ q("swy") }} - {{ q("swp") }}) end)
      / nullif(sum(case when {{ q("W") }} > 0 then {{ q("W") }} end), 0)
{%- elif metric == "mce" %}
    max(case when {{ q("W") }} > 0 then abs({{ q("swy") }} - {{ q("swp") }}) / {{ q("W") }} end)
{%- elif metric == "citl" %}
    sum({{ q("swp") }}) / nullif({{ W }}, 0) - sum({{ q("swy") }}) / nullif({{ W }}, 0)
{%- elif metric == "brier" %}
    sum({{ q("sw_sq_resid") }}) / nullif({{ W }}, 0)
{%- elif metric == "log_loss" %}
    case when sum({{ q("n_infinite_logloss") }}) = 0
      then sum({{ q("sw_logloss") }}) / nullif({{ W }}, 0) end
{%- elif metric == "spiegelhalter_z" %}
    sum({{ q("sw_spieg") }}) / nullif(sqrt(case when max({{ q("sampling") }}) = 1
      then sum({{ q("sw2_spieg_var") }}) else sum({{ q("sw_spieg_var") }}) end), 0)
{%- endif %} as {{ q("value") }}
  from sqlcal_summary cross join sqlcal_kind{{ group }}
)
{%- endif %}
select '{{ metric }}' as {{ q("metric") }}, {{ keys }} {{ q("value") }},
  cast({{ max if max is not none else "null" }} as {{ double }}) as {{ q("max") }},
  {{ q("n") }}, {{ q("W") }},
  case
    when {{ q("problem") }} is not null then {{ q("problem") }}
    when {{ q("value") }} is null and {{ q("W") }} > 0 then 'undefined (an infinite log loss or a zero variance)'
  end as {{ q("problem") }},
  {%- set judged = ("abs(" ~ q("value") ~ ")") if metric in ("citl", "spiegelhalter_z") else q("value") %}
  case when {{ q("problem") }} is not null
    or ({{ q("value") }} is null and {{ q("W") }} > 0)
    {%- if max is not none %} or {{ judged }} > {{ max }}{% endif %} then 1 else 0 end as {{ q("failed") }}
from sqlcal_metric
{% endmacro %}

{% macro calibration_failures(model, score, label, metric, max, weight=none, by=none, bins=15,
                              confidence=0.9, cells=1024) %}
{%- if max is none %}
  {{ exceptions.raise_compiler_error("sqlcal.calibration: max is required") }}
{%- endif %}
select * from (
{{ sqlcal.calibration_values(model, score, label, metric, max, weight, by, bins, confidence,
                             cells) }}
) sqlcal_values
where {{ adapter.quote("failed") }} = 1
{% endmacro %}

{#- Why a group's rows cannot be measured (NULL when they can): the library's validation on the
    summary's check columns. #}
{% macro _checks() %}
{%- set q = adapter.quote %}
    case
      when sum({{ q("chk_p_count") }}) < sum({{ q("n") }}) then 'NULL scores'
      when max({{ q("p_max") }}) > 1 or min({{ q("p_max") }}) < 0 then 'scores outside [0, 1]'
      when sum({{ q("chk_y_count") }}) < sum({{ q("n") }}) then 'NULL labels'
      when min({{ q("chk_y_min") }}) < 0 or max({{ q("chk_y_max") }}) > 1 then 'labels outside [0, 1]'
      when sum({{ q("chk_y_soft") }}) > 0 then 'labels strictly between 0 and 1'
      when sum({{ q("chk_w_count") }}) < sum({{ q("n") }}) then 'NULL weights'
      when min({{ q("chk_w_min") }}) < 0 then 'negative weights'
    end as {{ q("problem") }}
{%- endmacro %}

{#- DOUBLE PRECISION as each adapter spells it (dbt's type_float is 32-bit on DuckDB). #}
{% macro double() %}{{ return(adapter.dispatch('double', 'sqlcal')()) }}{% endmacro %}
{% macro default__double() %}double precision{% endmacro %}
{% macro duckdb__double() %}double{% endmacro %}
{% macro spark__double() %}double{% endmacro %}
{% macro trino__double() %}double{% endmacro %}
{% macro bigquery__double() %}float64{% endmacro %}
{% macro snowflake__double() %}double{% endmacro %}
""".replace("__METRICS__", "{" + ", ".join(f'"{m}": "{s}"' for m, s in TEST_METRICS.items())
           + "}")

# The summary store written by dbt models: the same tables and columns as sqlcal.snapshot
# (sqlcal.monitor.schema), one version per period (a model materialized incremental with
# delete+insert on period_start rewrites a period in place), labels of unknown arrival time.
_STORE = """
{#- The spec of the stored sums (what sqlcal.stored reads from the manifest) and its hash. #}
{% macro store_spec(relation, score, label, time, weight=none, by=none, cells=16384, bins=15,
                    where=none) %}
{%- set by = [] if by is none else ([by] if by is string else by) %}
{%- set spec = {"summary_version": __SUMMARY_VERSION__, "origin": "dbt:" ~ relation,
                "where": where, "score": score, "label": label, "weight": weight, "by": by,
                "time": time, "grain": "day", "label_time": none, "unknown": "negative",
                "delays": __DELAYS__, "cells": cells | int, "bins": [[bins | int, "sqlcal"]],
                "logit": [], "smooth": [], "levels": false} %}
{%- set text = tojson(spec, sort_keys=true) %}
{{ return({"spec": text, "hash": local_md5(text)[:16], "by": by}) }}
{% endmacro %}

{#- The rows of a predictions relation as the store reads them: the keys under their stored
    names key_<key> (so a key may take any name), p, y (NULL = not known yet = 0), w, and the
    day. #}
{% macro store_input(relation, score, label, time, weight, by, where) %}
{%- set q = adapter.quote %}
{%- set double = sqlcal.double() %}
  select
{%- for c in by %}
    {{ c }} as {{ q("key_" ~ c) }},
{%- endfor %}
    cast({{ score }} as {{ double }}) as {{ q("p") }},
    cast(coalesce({{ label }}, 0) as {{ double }}) as {{ q("y") }},
    cast({{ weight if weight is not none else 1 }} as {{ double }}) as {{ q("w") }},
    cast({{ dbt.date_trunc("day", "cast(" ~ time ~ " as " ~ dbt.type_timestamp() ~ ")") }}
      as {{ dbt.type_timestamp() }}) as {{ q("period_start") }}
  from {{ relation }}
{%- if where %}
  where {{ where }}
{%- endif %}
{% endmacro %}

{#- A model of the store table sqlcal_sum_<kind> (kind: totals, cells, bins). #}
{% macro store_rows(kind, relation, score, label, time, weight=none, by=none, cells=16384,
                    bins=15, where=none) %}
{%- if kind not in ["totals", "cells", "bins"] %}
  {{ exceptions.raise_compiler_error("sqlcal.store_rows: kind must be totals, cells or bins, "
     ~ "not " ~ kind) }}
{%- endif %}
{%- if cells | int not in [1024, 2048, 4096, 8192, 16384, 32768, 65536] %}
  {{ exceptions.raise_compiler_error("sqlcal.store_rows: cells must be a power of two from "
     ~ "2^10 to 2^16, not " ~ cells) }}
{%- endif %}
{%- set spec = sqlcal.store_spec(relation, score, label, time, weight, by, cells, bins, where) %}
{%- set by = spec["by"] %}
{%- set keys = [] %}
{%- for c in by %}{% do keys.append("key_" ~ c) %}{% endfor %}
{%- set q = adapter.quote %}
{%- set columns = __COLUMNS__ %}
with sqlcal_rows as (
{{ sqlcal.store_input(relation, score, label, time, weight, by, where) }}
),
sqlcal_stored as (
{%- if kind == "totals" %}
{{ sqlcal.store_totals("sqlcal_rows", keys) }}
{%- elif kind == "cells" %}
{{ sqlcal.store_cells("sqlcal_rows", keys, cells | int) }}
{%- else %}
{{ sqlcal.store_bins("sqlcal_rows", keys, bins | int) }}
{%- endif %}
)
select '{{ spec["hash"] }}' as {{ q("spec_hash") }},
  cast(1 as {{ dbt.type_bigint() }}) as {{ q("version") }},
  s.{{ q("period_start") }},
  cast(s.{{ q("delay") }} as {{ dbt.type_bigint() }}) as {{ q("delay") }},
  {{ sqlcal.group_keys(by) }} as {{ q("group_keys") }},
{%- for c in keys %}
  s.{{ q(c) }},
{%- endfor %}
{%- if kind == "cells" %}
  cast({{ cells | int }} as {{ dbt.type_bigint() }}) as {{ q("cells") }},
{%- elif kind == "bins" %}
  cast({{ bins | int }} as {{ dbt.type_bigint() }}) as {{ q("bins") }},
  cast('sqlcal' as {{ dbt.type_string() }}) as {{ q("convention") }},
{%- endif %}
{%- for c in columns[kind] %}
  s.{{ q(c) }}{{ "," if not loop.last }}
{%- endfor %}
from sqlcal_stored s
{% endmacro %}

{#- The group's keys as JSON text (sorted keys; values as text, not escaped: the
    readers use the typed key columns key_<key>). #}
{% macro group_keys(by) %}
{%- if not by %}'{}'{% else -%}
'{' ||
{%- for c in by | sort %}
  {%- set col = adapter.quote("key_" ~ c) %}
  '{{ tojson(c) }}:' || case when s.{{ col }} is null then 'null' else '"' ||
    cast(s.{{ col }} as {{ dbt.type_string() }}) || '"' end
    || {{ "','" if not loop.last else "'}'" }}
  {%- if not loop.last %} ||{% endif %}
{%- endfor %}
{%- endif %}
{%- endmacro %}

{#- A model of the store's manifest sqlcal_snapshots: one row per period, version 1, labels as
    of as_of (default: the run's start), mature at age >= horizon + settle days. #}
{% macro store_manifest(relation, score, label, time, weight=none, by=none, cells=16384,
                        bins=15, where=none, as_of=none, horizon_days=30, settle_days=1) %}
{%- set spec = sqlcal.store_spec(relation, score, label, time, weight, by, cells, bins, where) %}
{%- set by = spec["by"] %}
{%- set q = adapter.quote %}
{%- set ts = dbt.type_timestamp() %}
{%- set as_of = as_of if as_of is not none else run_started_at.strftime("%Y-%m-%d %H:%M:%S") %}
with sqlcal_rows as (
{{ sqlcal.store_input(relation, score, label, time, weight, by, where) }}
),
sqlcal_groups as (
  select {{ q("period_start") }},
    count(*) as {{ q("n") }},
    sum(abs({{ q("w") }} - floor({{ q("w") }}))) as {{ q("frac") }}
  from sqlcal_rows
  group by {{ q("period_start") }}{% for c in by %}, {{ q("key_" ~ c) }}{% endfor %}
)
select '{{ spec["hash"] }}' as {{ q("spec_hash") }},
  '{{ spec["spec"] | replace("'", "''") }}' as {{ q("spec") }},
  {{ q("period_start") }},
  cast({{ dbt.dateadd("day", 1, q("period_start")) }} as {{ ts }}) as {{ q("period_end") }},
  cast('{{ as_of }}' as {{ ts }}) as {{ q("as_of") }},
  cast(1 as {{ dbt.type_bigint() }}) as {{ q("version") }},
  true as {{ q("current") }},
  cast(sum({{ q("n") }}) as {{ dbt.type_string() }}) as {{ q("fingerprint") }},
  cast({{ dbt.dateadd("day", 1 + horizon_days + settle_days, q("period_start")) }} as {{ ts }})
    <= cast('{{ as_of }}' as {{ ts }}) as {{ q("mature") }},
  cast(sum({{ q("n") }}) as {{ dbt.type_bigint() }}) as {{ q("rows_scanned") }},
  cast(count(*) as {{ dbt.type_bigint() }}) as {{ q("n_groups") }},
  sum({{ q("frac") }}) = 0 as {{ q("integer_weights") }},
  cast('{{ as_of }}' as {{ ts }}) as {{ q("written_at") }},
  cast('__VERSION__' as {{ dbt.type_string() }}) as {{ q("sqlcal_version") }}
from sqlcal_groups
group by {{ q("period_start") }}
{% endmacro %}
"""

# The change detector of sqlcal.monitor.detect (the e-detector on per-day, per-bet-bin sums) in
# SQL over the summary store: the plug-in bets from RANGE window frames over the day index, the
# CUSUM recursion as a running sum minus its running minimum, the average over the plug-in
# windows as a log-mean-exp (the library's numbers to rounding).
_CHANGE = r"""
{#- The generic test: one row per group whose change detector alarmed (or one row naming why
    the store cannot be checked). #}
{% test calibration_change(model, manifest, by=none, bins=8, tolerance=[0.0, 0.1], alpha=0.05,
                           checks=365, windows=[3, 7, 28], reference_days=28,
                           horizon="30d", settle="1d", spec=none) %}
select * from (
{{ sqlcal.calibration_change_values(model, manifest, by, bins, tolerance, alpha, checks,
                                    windows, reference_days, horizon, settle, spec) }}
) sqlcal_change
where {{ adapter.quote("failed") }} = 1
{% endtest %}

{#- Per group: the latest mature day and the detector on it, and the first alarm (alarm_day,
    change_day, log_M_at_alarm; NULL when none), `failed` = 1 when the group alarmed. #}
{% macro calibration_change_values(model, manifest, by=none, bins=8, tolerance=[0.0, 0.1],
                                   alpha=0.05, checks=365, windows=[3, 7, 28],
                                   reference_days=28, horizon="30d", settle="1d",
                                   spec=none) %}
{%- set by = sqlcal._change_keys(manifest, by, spec) %}
{%- set q = adapter.quote %}
{%- set keys %}{% for c in by %}{{ q(c) }}, {% endfor %}{% endset %}
{%- set part %}partition by {% for c in by %}{{ q(c) }}, {% endfor %}sqlcal_one{% endset %}
{{ sqlcal._change_ctes(model, manifest, by, bins, tolerance, alpha, checks, windows,
                       reference_days, horizon, settle, spec) }},
sqlcal_flagged as (
  select d.*, min(sqlcal_alarm_t) over ({{ part }}) as first_alarm_t,
    max(t) over ({{ part }}) as last_t
  from sqlcal_detector d
),
sqlcal_summary as (
  select {{ keys }}
    max(case when t = last_t then ps end) as last_ps,
    max(case when t = last_t then log_m end) as log_m_last,
    max(first_alarm_t) as sqlcal_alarm_t,
    max(case when sqlcal_alarm_t = first_alarm_t then sqlcal_alarm_value end) as log_m_alarm,
    max(case when sqlcal_alarm_t = first_alarm_t then best_start end) as change_t
  from sqlcal_flagged
  group by {{ keys }} sqlcal_one
)
select {{ keys }}
  s.last_ps as {{ q("last_day") }},
  s.log_m_last as {{ q("log_M") }},
  {{ sqlcal._change_threshold(alpha, checks) }} as {{ q("threshold") }},
  cast({{ dbt.dateadd("day", "s.sqlcal_alarm_t", "f.first_ps") }} as {{ dbt.type_timestamp() }})
    as {{ q("alarm_day") }},
  cast({{ dbt.dateadd("day", "s.change_t", "f.first_ps") }} as {{ dbt.type_timestamp() }})
    as {{ q("change_day") }},
  s.log_m_alarm as {{ q("log_M_at_alarm") }},
  cast(null as {{ dbt.type_string() }}) as {{ q("problem") }},
  case when s.sqlcal_alarm_t is null then 0 else 1 end as {{ q("failed") }}
from sqlcal_summary s cross join sqlcal_first f cross join sqlcal_problem p
where p.problem is null
union all
select {% for c in by %}null as {{ q(c) }}, {% endfor %}
  null, null, {{ sqlcal._change_threshold(alpha, checks) }}, null, null, null, p.problem, 1
from sqlcal_problem p
where p.problem is not null
{% endmacro %}

{#- Per group and mature day the group has rows on: n, W, log_e (the day's log e-value, the
    log-mean-exp over the plug-in windows), log_M (the detector), threshold, alarm. The days
    between two stored days of a group hold log_e = 0 (sqlcal.detect lists them too). #}
{% macro calibration_change_path(model, manifest, by=none, bins=8, tolerance=[0.0, 0.1],
                                 alpha=0.05, checks=365, windows=[3, 7, 28],
                                 reference_days=28, horizon="30d", settle="1d",
                                 spec=none) %}
{%- set by = sqlcal._change_keys(manifest, by, spec) %}
{%- set q = adapter.quote %}
{{ sqlcal._change_ctes(model, manifest, by, bins, tolerance, alpha, checks, windows,
                       reference_days, horizon, settle, spec) }}
select {% for c in by %}d.{{ q(c) }}, {% endfor %}
  d.ps as {{ q("day") }},
  d.n as {{ q("n") }},
  d.w as {{ q("W") }},
  d.log_e as {{ q("log_e") }},
  d.log_m as {{ q("log_M") }},
  {{ sqlcal._change_threshold(alpha, checks) }} as {{ q("threshold") }},
  case when d.log_m >= {{ sqlcal._change_threshold(alpha, checks) }} then 1 else 0 end
    as {{ q("alarm") }}
from sqlcal_detector d cross join sqlcal_problem p
where p.problem is null
{% endmacro %}

{#- log c = ln(checks / alpha): P(any false alarm within checks daily checks) <= alpha. #}
{% macro _change_threshold(alpha, checks) -%}
ln(cast({{ checks / alpha }} as {{ sqlcal.double() }}))
{%- endmacro %}

{#- The group keys: the caller's, or the snapshot's (read from the manifest's spec). #}
{% macro _change_keys(manifest, by, spec) %}
{%- if spec is not none and not modules.re.fullmatch("[0-9a-f]{16}", spec | string) %}
  {{ exceptions.raise_compiler_error("sqlcal.calibration_change: spec must be a stored spec hash (16 hex digits), not " ~ spec) }}
{%- endif %}
{%- if by is none and execute %}
  {%- set where = (" where " ~ adapter.quote("spec_hash") ~ " = '" ~ spec ~ "'") if spec else "" %}
  {%- set found = run_query("select max(" ~ adapter.quote("spec") ~ ") from " ~ manifest
                            ~ where) %}
  {%- set text = found.columns[0].values()[0] if found else none %}
  {{ return(fromjson(text)["by"] if text else []) }}
{%- endif %}
{{ return([] if by is none else ([by] if by is string else by)) }}
{% endmacro %}

{% macro _greatest(items) -%}
{%- if items | length == 1 %}{{ items[0] }}{% else %}greatest({{ items | join(", ") }}){% endif %}
{%- endmacro %}

{#- log1p and expm1 to full precision from ln and exp (Goldberg 1991, Theorem 4). #}
{% macro _log1p(x) -%}
(case when 1 + ({{ x }}) = 1 then ({{ x }}) else ln(1 + ({{ x }})) * ({{ x }}) / ((1 + ({{ x }})) - 1) end)
{%- endmacro %}
{% macro _expm1(x) -%}
(case when exp({{ x }}) = 1 then ({{ x }}) else (exp({{ x }}) - 1) * ({{ x }}) / ln(exp({{ x }})) end)
{%- endmacro %}

{#- The detector per group and stored mature day, as CTEs (the e-detector of sqlcal.detect):
    sqlcal_days (the mature days, current versions), sqlcal_cells (per group, day and score
    cell), sqlcal_binned (bet bins of equal weight on the reference days, edges on cells),
    per day and bin the statistics S, V, E, E2 and, per plug-in window m, the bet from the m
    days before (RANGE frame over the day index), the day's log e-value per window, the CUSUM
    log M = C_t - min(0, min_{s<t} C_s) (C the running sum of log e), their log-mean-exp, and
    the first alarm day per row. #}
{% macro _change_ctes(model, manifest, by, bins, tolerance, alpha, checks, windows,
                      reference_days, horizon, settle, spec) %}
{%- set q = adapter.quote %}
{%- set double = sqlcal.double() %}
{%- set name = "sqlcal.calibration_change: " %}
{%- if bins is not number or bins != bins | int or bins < 1 or bins > 64 %}
  {{ exceptions.raise_compiler_error(name ~ "bins must be an integer in [1, 64], not " ~ bins) }}
{%- endif %}
{%- if alpha is not number or alpha <= 0 or alpha >= 1 %}
  {{ exceptions.raise_compiler_error(name ~ "alpha must lie in (0, 1), not " ~ alpha) }}
{%- endif %}
{%- if checks is not number or checks != checks | int or checks < 1 %}
  {{ exceptions.raise_compiler_error(name ~ "checks must be a whole number of daily checks >= 1, not " ~ checks) }}
{%- endif %}
{%- if tolerance is string or tolerance | length != 2 or tolerance | reject("number") | list
      or tolerance | min < 0 %}
  {{ exceptions.raise_compiler_error(name ~ "tolerance must be (absolute, relative) >= 0, not " ~ tolerance) }}
{%- endif %}
{%- if windows is string or not windows or windows | reject("number") | list
      or windows | select("lt", 1) | list or windows | map("int") | list != windows | list %}
  {{ exceptions.raise_compiler_error(name ~ "windows must be whole numbers of days >= 1, not " ~ windows) }}
{%- endif %}
{%- if reference_days is not number or reference_days != reference_days | int or reference_days < 1 %}
  {{ exceptions.raise_compiler_error(name ~ "reference_days must be a whole number >= 1, not " ~ reference_days) }}
{%- endif %}
{%- if spec is not none and not modules.re.fullmatch("[0-9a-f]{16}", spec | string) %}
  {{ exceptions.raise_compiler_error(name ~ "spec must be a stored spec hash (16 hex digits), not " ~ spec) }}
{%- endif %}
{%- set ages = [] %}
{%- if horizon is number %}
  {#- a number of daily checks was horizon's meaning before 0.x: never read it as days #}
  {{ exceptions.raise_compiler_error(name ~ "horizon is the labels' maturity age such as '30d', not " ~ horizon ~ "; the number of daily checks the false-alarm bound covers is checks=") }}
{%- endif %}
{%- for option, text in [("horizon", horizon), ("settle", settle)] %}
  {%- if text is number %}
    {%- do ages.append(text) %}
  {%- elif text is string and modules.re.fullmatch("[0-9]+(\.[0-9]*)?[dh]", text) %}
    {%- do ages.append(text[:-1] | float * (1 if text[-1] == "d" else 1 / 24)) %}
  {%- else %}
    {{ exceptions.raise_compiler_error(name ~ option ~ " must look like '30d' or '12h', not " ~ text) }}
  {%- endif %}
{%- endfor %}
{%- set age_seconds = ((ages[0] + ages[1]) * 86400) | round | int %}
{%- set ea, er = tolerance[0] | float, tolerance[1] | float %}
{%- set keys %}{% for c in by %}{{ q(c) }}, {% endfor %}{% endset %}
{%- set part %}partition by {% for c in by %}{{ q(c) }}, {% endfor %}sqlcal_one{% endset %}
{%- set K = windows | length %}
{%- set c = sqlcal._change_threshold(alpha, checks) %}
with sqlcal_versions as (
  {#- per period the greatest version with a manifest row: the one readers use #}
  select {{ q("spec_hash") }} as h, {{ q("period_start") }} as ps, max({{ q("version") }}) as v
  from {{ manifest }}
  group by {{ q("spec_hash") }}, {{ q("period_start") }}
),
sqlcal_current as (
  select m.{{ q("spec_hash") }} as h, m.{{ q("period_start") }} as ps,
    m.{{ q("period_end") }} as pe, m.{{ q("as_of") }} as as_of, m.{{ q("version") }} as v,
    m.{{ q("integer_weights") }} as iw
  from {{ manifest }} m
  join sqlcal_versions c on m.{{ q("spec_hash") }} = c.h and m.{{ q("period_start") }} = c.ps
    and m.{{ q("version") }} = c.v
{%- if spec is not none %}
  where m.{{ q("spec_hash") }} = '{{ spec }}'
{%- endif %}
),
sqlcal_spec as (
  select count(distinct h) as n_specs, min(h) as h from sqlcal_current
),
sqlcal_days as (
  {#- a day feeds the detector once its stored version holds its final labels #}
  select c.ps, c.v, c.iw
  from sqlcal_current c cross join sqlcal_spec s
  where c.h = s.h and {{ dbt.dateadd("second", age_seconds, "c.pe") }} <= c.as_of
),
sqlcal_first as (
  select min(ps) as first_ps,
    count(*) as n_days,
    sum(case when iw then 0 else 1 end) as n_fractional
  from sqlcal_days
),
sqlcal_problem as (
  select case
    when s.n_specs > 1 then 'the store holds snapshots of several specs; name one with spec='
    when f.n_days = 0 then 'no mature day in the store (horizon + settle)'
    when f.n_fractional > 0 then 'the detector needs frequency weights (whole numbers); the store holds non-integer weights'
  end as problem
  from sqlcal_spec s cross join sqlcal_first f
),
sqlcal_last as (
  select max(cast({{ dbt.datediff("f.first_ps", "d.ps", "day") }} as integer)) as last_t
  from sqlcal_days d cross join sqlcal_first f
),
sqlcal_index as (
  {#- t: the day's index in the calendar of mature days (0 = the first) #}
  select d.ps, d.v, cast({{ dbt.datediff("f.first_ps", "d.ps", "day") }} as integer) as t
  from sqlcal_days d cross join sqlcal_first f
),
sqlcal_cells as (
  {#- the cells of the mature days' current versions: the day rows are merged into the stored
      rows and carried over each (spec, period, version) by a window (no join: a plan that
      cannot go wrong on a fresh table without statistics) #}
  select {{ keys }} 1 as sqlcal_one, t, ps, cell,
    sum(n) as n, sum(w) as w, sum(swy) as swy, sum(swp) as swp, sum(swpp) as swpp
  from (
    select x.*,
      max(day_t) over (partition by h, period_start, version) as t,
      max(day_ps) over (partition by h, period_start, version) as ps
    from (
      select c.{{ q("spec_hash") }} as h, c.{{ q("period_start") }} as period_start,
        c.{{ q("version") }} as version,
{%- for c in by %}
        c.{{ q("key_" ~ c) }} as {{ q(c) }},
{%- endfor %}
        c.{{ q("cell") }} as cell, c.{{ q("n") }} as n, c.{{ q("W") }} as w,
        c.{{ q("swy") }} as swy, c.{{ q("swp") }} as swp, c.{{ q("swpp") }} as swpp,
        null as day_t, null as day_ps
      from (select * from {{ model }}) c
      union all
      select s.h, d.ps, d.v,{% for c in by %} null,{% endfor %} null, null, null, null, null, null,
        d.t, d.ps
      from sqlcal_index d cross join sqlcal_spec s
    ) x
  ) y
  where t is not null and cell is not null
  group by {{ keys }} t, ps, cell
),
sqlcal_ref as (
  {#- the reference days' weight per cell, and the share of weight below each cell #}
  select {{ keys }} sqlcal_one, cell, w,
    sum(w) over ({{ part }} order by cell rows between unbounded preceding and current row) as cum,
    sum(w) over ({{ part }}) as total
  from (
    select {{ keys }} sqlcal_one, cell, sum(w) as w
    from sqlcal_cells
    where t < {{ reference_days | int }}
    group by {{ keys }} sqlcal_one, cell
  ) r
),
{%- if bins > 1 %}
sqlcal_levels as (
{%- for b in range(1, bins | int) %}
  select {{ b }} as b{{ " union all" if not loop.last }}
{%- endfor %}
),
{%- endif %}
sqlcal_edges as (
  {#- edges: cell 0 and, for b = 1 .. bins - 1, the first cell with share below >= b / bins #}
  select distinct {{ keys }} sqlcal_one, edge from (
    select {{ keys }} sqlcal_one, 0 as edge from sqlcal_cells
{%- if bins > 1 %}
    union all
    select {% for c in by %}r.{{ q(c) }}, {% endfor %}r.sqlcal_one, min(r.cell) as edge
    from sqlcal_ref r cross join sqlcal_levels l
    where r.total > 0
      and (r.cum - r.w) / r.total >= cast(l.b as {{ double }}) / cast({{ bins | int }} as {{ double }})
    group by {% for c in by %}r.{{ q(c) }}, {% endfor %}r.sqlcal_one, l.b
{%- endif %}
  ) e
),
sqlcal_binned as (
  {#- each cell's bet bin: the number of edges at or below it (a running count over the cells
      and edges in cell order; no range join) #}
  select x.*,
    sum(edge_row) over ({{ part }} order by cell, edge_row desc
      rows between unbounded preceding and current row) as bin
  from (
    select {{ keys }} sqlcal_one, t, ps, cell, n, w, swy, swp, swpp, 0 as edge_row
    from sqlcal_cells
    union all
    select {{ keys }} sqlcal_one, null, null, edge, null, null, null, null, null, 1
    from sqlcal_edges
  ) x
),
sqlcal_stats as (
  {#- per group, day and bet bin: S = Σw(y − p), V = Σwp(1 − p), E = Σwε, E2 = Σwε² #}
  select {{ keys }} sqlcal_one, t, ps, bin, n, w,
    swy - swp as s,
    swp - swpp as v,
    cast({{ ea }} as {{ double }}) * w + cast({{ er }} as {{ double }}) * swp as e,
    cast({{ ea ** 2 }} as {{ double }}) * w + cast({{ 2 * ea * er }} as {{ double }}) * swp
      + cast({{ er ** 2 }} as {{ double }}) * swpp as e2
  from (
    select {{ keys }} sqlcal_one, t, ps, bin,
      sum(n) as n, sum(w) as w, sum(swy) as swy, sum(swp) as swp, sum(swpp) as swpp
    from sqlcal_binned
    where edge_row = 0
    group by {{ keys }} sqlcal_one, t, ps, bin
  ) x
),
sqlcal_past as (
  {#- per window m: the sums over the m days before the day (0 before day m) #}
  select x.*
{%- for m in windows %}
  {%- set i = loop.index0 %}
  {%- for col in ["w", "s", "v", "e", "e2"] %},
    case when t >= {{ m | int }} then coalesce(sum({{ col }}) over ({{ part }}, bin order by t
      range between {{ m | int }} preceding and 1 preceding), 0) else 0 end as {{ col }}_{{ i }}
  {%- endfor %}
{%- endfor %}
  from sqlcal_stats x
),
sqlcal_ratio as (
  {#- the bet's Kelly ratio |Δ̃| / σ̃², in the library's operation order #}
  select x.*
{%- for i in range(K) %},
    case when w_{{ i }} > 0 and (v_{{ i }} + e_{{ i }} + 4 * e2_{{ i }}) / w_{{ i }} > 0
      then (greatest(abs(s_{{ i }}) - e_{{ i }}, 0) / w_{{ i }})
        / ((v_{{ i }} + e_{{ i }} + 4 * e2_{{ i }}) / w_{{ i }})
      else 0 end as ratio_{{ i }}
{%- endfor %}
  from sqlcal_past x
),
sqlcal_bets as (
  {#- λ = clip(κ·sign(Δ̃)·log(1 + |Δ̃| / σ̃²), −1, 1), κ = 1/2 #}
  select x.*
{%- for i in range(K) %},
    greatest(least(0.5 * (case when s_{{ i }} > 0 then 1 when s_{{ i }} < 0 then -1 else 0 end)
      * {{ sqlcal._log1p("ratio_" ~ i) }}, 1), -1) as lam_{{ i }}
{%- endfor %}
  from sqlcal_ratio x
),
sqlcal_terms as (
  select x.*
{%- for i in range(K) %},
    lam_{{ i }} * s - abs(lam_{{ i }}) * e
      - ({{ sqlcal._expm1("abs(lam_" ~ i ~ ")") }} - abs(lam_{{ i }})) * (v + e + 4 * e2)
      as term_{{ i }}
{%- endfor %}
  from sqlcal_bets x
),
sqlcal_log_e as (
  {#- the day's log e-value per window; 1 (log 0) on the reference days #}
  select {{ keys }} sqlcal_one, t, ps, sum(n) as n, sum(w) as w
{%- for i in range(K) %},
    case when t < {{ reference_days | int }} then 0 else sum(term_{{ i }}) end as le_{{ i }}
{%- endfor %}
  from sqlcal_terms
  group by {{ keys }} sqlcal_one, t, ps
),
sqlcal_running as (
  select x.*,
    lead(t) over ({{ part }} order by t) as next_t,
    min(t) over ({{ part }}) as first_t
{%- for i in range(K) %},
    sum(le_{{ i }}) over ({{ part }} order by t rows between unbounded preceding and current row)
      as c_{{ i }}
{%- endfor %}
  from sqlcal_log_e x
),
sqlcal_each as (
  {#- log M_t = max_j Σ_{s=j..t} log e_s = C_t − min(0, min_{s<t} C_s) per window #}
  select x.*
{%- for i in range(K) %},
    c_{{ i }} - least(0, coalesce(min(c_{{ i }}) over ({{ part }} order by t
      rows between unbounded preceding and 1 preceding), 0)) as m_{{ i }}
{%- endfor %}
  from sqlcal_running x
),
sqlcal_starts as (
  {#- each window's excursion start: the stored day after the last day with log M <= 0 #}
  select x.*
{%- for i in range(K) %},
    coalesce(max(case when m_{{ i }} <= 0 then next_t end) over ({{ part }} order by t
      rows between unbounded preceding and 1 preceding), first_t) as start_{{ i }}
{%- endfor %}
  from sqlcal_each x
),
sqlcal_top as (
{%- set ms, gaps, les = [], [], [] %}
{%- for i in range(K) %}
  {%- do ms.append("m_" ~ i) %}{% do gaps.append("greatest(m_" ~ i ~ ", 0)") %}{% do les.append("le_" ~ i) %}
{%- endfor %}
  select x.*,
    {{ sqlcal._greatest(ms) }} as max_m,
    {{ sqlcal._greatest(gaps) }} as max_gap,
    {{ sqlcal._greatest(les) }} as max_e
  from sqlcal_starts x
),
sqlcal_mean as (
  {#- log of the mean over the windows of M (the detector), of e (the day's e-value), and of M
      on the days after this one that the group has no rows on (log e = 0 there) #}
  select x.*,
    ln(({% for i in range(K) %}exp(m_{{ i }} - max_m){{ " + " if not loop.last }}{% endfor %}) / {{ K }}) + max_m as log_m,
    ln(({% for i in range(K) %}exp(le_{{ i }} - max_e){{ " + " if not loop.last }}{% endfor %}) / {{ K }}) + max_e as log_e,
    ln(({% for i in range(K) %}exp(greatest(m_{{ i }}, 0) - max_gap){{ " + " if not loop.last }}{% endfor %}) / {{ K }}) + max_gap as log_m_gap,
    case
{%- for i in range(K) %}
      when 1 = 1{% for j in range(K) if j != i %} and m_{{ i }} {{ ">" if j < i else ">=" }} m_{{ j }}{% endfor %} then start_{{ i }}
{%- endfor %}
    end as best_start,
    coalesce(next_t, l.last_t + 1) > t + 1 as gap_after
  from sqlcal_top x cross join sqlcal_last l
),
sqlcal_detector as (
  {#- the alarm this row raises: on its day, or on the next day when the group has no rows then #}
  select x.*,
    case when log_m >= {{ c }} then t when gap_after and log_m_gap >= {{ c }} then t + 1 end
      as sqlcal_alarm_t,
    case when log_m >= {{ c }} then log_m when gap_after and log_m_gap >= {{ c }} then log_m_gap end
      as sqlcal_alarm_value
  from sqlcal_mean x
)
{%- endmacro %}
"""

_PROPERTIES = """\
# sqlcal: generated by `python -m sqlcal.export.dbtgen`; do not edit.
version: 2
macros:
  - name: test_calibration
    description: >
      One row per group whose calibration metric exceeds max (metric: ece, mce, citl, brier,
      log_loss, spiegelhalter_z, cutoff_error), or whose rows fail sqlcal's validation. A test
      fails only with enough rows per group: cutoff_error (judged on its lower confidence bound)
      can fail a model of cutoff error e only above {cutoff_even}/(e - max)^2 rows;
      spiegelhalter_z hardly detects a logit shift when scores lie on both sides of 0.5 (use
      citl); and dbt build skips every model downstream of a failing test unless its severity
      is warn. See the package README, "What the tests can detect".
    arguments:
      - name: model
        description: the model (or source) holding the scores
      - name: score
        description: the score column, a probability in [0, 1]
      - name: label
        description: the 0/1 outcome column
      - name: metric
        description: ece, mce, citl, brier, log_loss, spiegelhalter_z or cutoff_error
      - name: max
        description: the largest value that passes (citl and spiegelhalter_z by absolute value)
      - name: weight
        description: a frequency-weight column (default none)
      - name: by
        description: group keys; one row per failing group
      - name: bins
        description: equal-width bins of ece and mce (default 15)
      - name: confidence
        description: cutoff_error's lower bound holds with (1 + confidence) / 2 (default 0.9)
      - name: cells
        description: score cells of cutoff_error's grid form, a power of two (default 1024)
  - name: test_calibration_change
    description: >
      The change detector of sqlcal.detect on the summary store's cells model: one row per
      group that alarmed. A failing test with the default severity makes dbt build skip every
      model downstream; set severity to warn to be told without stopping them.
"""

_README = """\
<!-- sqlcal: generated by `python -m sqlcal.export.dbtgen` (or `sqlcal dbt FOLDER`); do not edit. -->
# sqlcal for dbt

Generated by `python -m sqlcal.export.dbtgen` (or `sqlcal dbt FOLDER`) from the statements sqlcal runs;
do not edit. See the sqlcal README's dbt section for packages.yml and a schema.yml example.

- `sqlcal.calibration` (generic test): `score`, `label`, `metric` (ece, mce, citl, brier,
  log_loss, spiegelhalter_z, cutoff_error), `max`, optional `weight`, `by`, `bins` (15),
  `cells` (1024), `confidence` (0.9); filter rows with dbt's own `where` config. It returns one
  row per failing group: `metric`, the `by` keys, `value`, `max`, `n`, `W`, `problem`.
  `citl` and `spiegelhalter_z` are judged on their absolute value; `cutoff_error` on the grid
  form's lower confidence bound (so a failure is real with probability (1 + confidence) / 2).
- `sqlcal.calibration_values(model, score, label, metric, ...)`: the same per group, every
  group, for a model.
- `sqlcal.summary_validation`, `summary_totals`, `summary_uniform_bins`, `summary_score_cells`,
  `summary_logit_grid`, `summary_levels` `(relation, by=[], [bins|cells,] weighted=true)`: the
  summaries of `sql/` over a relation with columns `score`, `label`, `weight` and the `by` keys;
  `sqlcal.from_summaries` finishes any exported metric from what they return.
- `sqlcal.store_rows(kind, relation, score, label, time, weight=, by=, cells=16384, bins=15,
  where=)` (kind: totals, cells, bins) and `sqlcal.store_manifest(...)`: models named
  `sqlcal_sum_totals`, `sqlcal_sum_cells`, `sqlcal_sum_bins` and `sqlcal_snapshots` write the
  summary store of `sqlcal.snapshot` (days; labels of unknown arrival time; version 1 per period,
  rewritten by an incremental delete+insert on `period_start`), which `sqlcal.stored` reads.
- `sqlcal.calibration_change` (generic test on the store's cells model, `sqlcal_sum_cells`):
  the change detector of `sqlcal.detect` in SQL, with its options and defaults: `manifest`
  (required, `ref('sqlcal_snapshots')`), `by` (the snapshot's keys), `bins` (8), `tolerance`
  ([0, 0.1]), `alpha` (0.05), `checks` (365), `windows` ([3, 7, 28]), `reference_days` (28),
  `horizon` ("30d"), `settle` ("1d"), `spec`. It returns one row per group that
  alarmed: the keys, `last_day`, `log_M` (the detector on it), `threshold` (ln(checks /
  alpha)), `alarm_day`, `change_day`, `log_M_at_alarm`, `problem`. Window functions only (the
  bets from RANGE frames over the day index, the CUSUM as a running sum minus its running
  minimum); `sqlcal.calibration_change_values` (every group) and `calibration_change_path`
  (per group and day: `n`, `W`, `log_e`, `log_M`, `threshold`, `alarm`) take the same
  arguments. The early stream (`lag`), `null="reference"`, an explicit `reference` window, a
  replayed check (`at`) and the change's split into intercept, slope and shape stay in Python
  (`sqlcal.detect`).

## What the tests can detect

A test fails a miscalibrated model only when a group holds enough rows; below these counts it
passes. The figures are per group, at `confidence` 0.9, for a model whose true log-odds are its
own plus {shift} (a logit shift), on scores whose log-odds are N(−1.2, 1.3) (mean score 0.28,
"skewed") or N(0, 1.3) ("centred" on 0.5); "fails" means in 90% of fresh samples.

- `cutoff_error` is judged on its lower confidence bound, estimate − (20 + √(2 ln(2/(1 −
  confidence))))/√n (Rossellini et al., Prop. 4.1), whose worst-case constant is large: the test
  can fail a model whose cutoff error is ε only when n > {cutoff_even}/(ε − max)², the square
  of that constant at confidence 0.9 (even odds there), and fails it in 90% of samples from
  about {cutoff_90}/(ε − max)² (the constant plus 1.28 standard deviations of the estimate). A
  cutoff error of 0.08 passes below about {cutoff_at_0_08} rows with `max: 0`; the shift of
  {shift} on skewed scores (ε = 0.049) needs {cutoff_shift_skewed} rows. Use it to certify a
  large miscalibration on a large table, not to catch a small one.
- `spiegelhalter_z` weights each residual y − p by 1 − 2p: a logit shift moves every residual
  the same way, so the residuals of scores above 0.5 cancel those below. With `max: 2` it fails
  the shift from {spiegelhalter_skewed} rows on skewed scores but needs {spiegelhalter_centred}
  on centred ones (at 30,000 rows it fails {spiegelhalter_centred_at_30000}% of the samples). It
  does not test for a shift; `citl` does: `max: 0.02` fails the same shift from {citl_skewed}
  rows (skewed) or {citl_centred} (centred).
- `dbt build` runs a model's tests before the models built on it, and skips every model
  downstream of a test that fails with dbt's default severity (error): one miscalibrated group
  stops the whole subgraph. Give calibration tests `config: {{severity: warn}}` (or run them
  with `dbt test` after `dbt run`) unless a miscalibrated model must block what uses it.

How these were obtained: the cutoff constant is (20 + √(2 ln 20))² = 503.9; the other counts are
the normal approximation of each statistic under the shift (its mean and variance from 2·10⁶
draws of the scores), confirmed by simulating the tests on fresh samples (numpy; sqlcal's
`tests/test_dbt_power.py` recomputes each figure).

Adapters: DuckDB, PostgreSQL (the default SQL), Spark/Databricks, BigQuery, Snowflake, Trino
(the detector needs RANGE frames with numeric offsets: PostgreSQL 11 or later; it runs in CI on
DuckDB and PostgreSQL). The exact forms (levels-based), isotonic/CORP and smooth ECE stay in Python
(`sqlcal.from_summaries` on `summary_levels`).
"""


if __name__ == "__main__":
    sys.exit(main())
