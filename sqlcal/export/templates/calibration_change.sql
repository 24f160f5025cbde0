
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
