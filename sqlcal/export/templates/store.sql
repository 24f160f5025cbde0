
{#- The spec of the stored sums (what sqlcal.stored reads from the manifest) and its hash, taken
    with the summary version this one extends (as sqlcal.snapshot takes it: the days a store
    holds from before and after an upgrade that only adds sums stay one spec). #}
{% macro store_spec(relation, score, label, time, weight=none, by=none, cells=16384, bins=15,
                    where=none) %}
{%- set by = [] if by is none else ([by] if by is string else by) %}
{%- set spec = {"summary_version": __HASHED_VERSION__, "origin": "dbt:" ~ relation,
                "where": where, "score": score, "label": label, "weight": weight, "by": by,
                "time": time, "grain": "day", "label_time": none, "unknown": "negative",
                "delays": __DELAYS__, "cells": cells | int, "bins": [[bins | int, "sqlcal"]],
                "logit": [], "smooth": [], "levels": false} %}
{%- set hash = local_md5(tojson(spec, sort_keys=true))[:16] %}
{%- do spec.update({"summary_version": __SUMMARY_VERSION__}) %}
{{ return({"spec": tojson(spec, sort_keys=true), "hash": hash, "by": by}) }}
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
