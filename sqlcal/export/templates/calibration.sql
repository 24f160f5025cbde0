
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
                     / sqrt({{ q("n_eff") }}), 1), 0) end as {{ q("value") }},
    cast(null as {{ double }}) as {{ q("variance") }}
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
{%- endif %} as {{ q("value") }},
{%- if metric in ("brier", "log_loss", "citl") %}
    {{ sqlcal._delta_variance(metric) }} as {{ q("variance") }}
{%- else %}
    cast(null as {{ double }}) as {{ q("variance") }}
{%- endif %}
  from sqlcal_summary cross join sqlcal_kind{{ group }}
)
{%- endif %}
{#- the delta method's interval (brier, log_loss, citl), value ± z·√variance, clipped as the
    library clips it; z tabulated by the generator for the usual levels (NULL ends otherwise) #}
{%- set z = __Z__.get(confidence | string) %}
{%- set half = "(" ~ (z if z is not none else "null") ~ " * sqrt(case when " ~ q("variance")
    ~ " > 0 then " ~ q("variance") ~ " else 0 end))" %}
{%- set low, high = {"brier": (0, 1), "log_loss": (0, none)}.get(metric, (none, none)) %}
select '{{ metric }}' as {{ q("metric") }}, {{ keys }} {{ q("value") }},
  {%- if metric in ("brier", "log_loss", "citl") %}
  cast({% if low is not none %}greatest({% endif %}{{ q("value") }} - {{ half }}{% if low is not none %}, {{ low }}){% endif %} as {{ double }}) as {{ q("lower") }},
  cast({% if high is not none %}least({% endif %}{{ q("value") }} + {{ half }}{% if high is not none %}, {{ high }}){% endif %} as {{ double }}) as {{ q("upper") }},
  {%- else %}
  cast(null as {{ double }}) as {{ q("lower") }},
  cast(null as {{ double }}) as {{ q("upper") }},
  {%- endif %}
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

{#- The delta method's variance of brier, log_loss or citl per group, as
    sqlcal.metrics.intervals computes it from the totals: Σv(r² − BS)²/W², Σv(ℓ − LL)²/W²,
    Σv(p − y − CITL)²/W², expanded into the summary's sums, v = w for frequency (whole-number)
    weights and w² for sampling weights (van der Vaart (1998), Asymptotic Statistics, ch. 3). #}
{% macro _delta_variance(metric) %}
{%- set q = adapter.quote %}
{%- set m = {} %}
{%- for name, frequency, sampling in [("v1", "W", "sw2"), ("vy", "swy", "sw2y"),
                                      ("vp", "swp", "sv_p"), ("vyy", "swy", "sv_yy"),
                                      ("vyp", "swyp", "sv_yp"), ("vpp", "swpp", "sv_pp"),
                                      ("r4", "sw_r4", "sv_r4"), ("l1", "sw_logloss", "sw2_logloss"),
                                      ("l2", "sw_logloss_sq", "sw2_logloss_sq")] %}
  {%- do m.update({name: "(case when max(" ~ q("sampling") ~ ") = 1 then sum(" ~ q(sampling)
                         ~ ") else sum(" ~ q(frequency) ~ ") end)"}) %}
{%- endfor %}
{%- set W = "sum(" ~ q("W") ~ ")" %}
{%- if metric == "brier" %}
  {%- set x = "(sum(" ~ q("sw_sq_resid") ~ ") / nullif(" ~ W ~ ", 0))" %}
    ({{ m.r4 }} - 2 * {{ x }} * ({{ m.vyy }} - 2 * {{ m.vyp }} + {{ m.vpp }})
     + {{ x }} * {{ x }} * {{ m.v1 }}) / nullif({{ W }} * {{ W }}, 0)
{%- elif metric == "log_loss" %}
  {%- set x = "(sum(" ~ q("sw_logloss") ~ ") / nullif(" ~ W ~ ", 0))" %}
    ({{ m.l2 }} - 2 * {{ x }} * {{ m.l1 }} + {{ x }} * {{ x }} * {{ m.v1 }})
     / nullif({{ W }} * {{ W }}, 0)
{%- else %}
  {%- set x = "((sum(" ~ q("swp") ~ ") - sum(" ~ q("swy") ~ ")) / nullif(" ~ W ~ ", 0))" %}
    (({{ m.vyy }} - 2 * {{ m.vyp }} + {{ m.vpp }}) - 2 * {{ x }} * ({{ m.vp }} - {{ m.vy }})
     + {{ x }} * {{ x }} * {{ m.v1 }}) / nullif({{ W }} * {{ W }}, 0)
{%- endif %}
{%- endmacro %}

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
