{{ config(materialized="ephemeral") }}
{#- 60 days x 2 segments x 200 predictions for the change detector: score q in [0.05, 0.55],
    label 1 when frac(i·φ) < the true rate (a low-discrepancy draw), weights 1, 2, 3. Segment
    'steady' is calibrated throughout; in segment 'drift' the true rate is 1.4·q from day 40. #}
{%- set per_day = 400 %}
{%- set i = index() %}
select
  case when {{ i }} - 2 * floor({{ i }} / 2) = 0 then 'steady' else 'drift' end as segment,
  0.05 + 0.5 * ({{ i }} * 0.7548776662466927 - floor({{ i }} * 0.7548776662466927)) as score,
  case when {{ i }} * 0.6180339887498949 - floor({{ i }} * 0.6180339887498949)
    < (0.05 + 0.5 * ({{ i }} * 0.7548776662466927 - floor({{ i }} * 0.7548776662466927)))
      * (case when {{ i }} - 2 * floor({{ i }} / 2) = 1 and {{ i }} >= 40 * {{ per_day }}
              then 1.4 else 1 end)
    then 1 else 0 end as label,
  1 + {{ i }} - 3 * floor({{ i }} / 3) as weight,
  {{ dbt.dateadd("hour", "cast(floor(" ~ i ~ " / " ~ per_day ~ ") * 24 + 12 as integer)",
                 "cast('2026-10-01' as " ~ dbt.type_timestamp() ~ ")") }} as t
from {{ integers(60 * per_day) }}
