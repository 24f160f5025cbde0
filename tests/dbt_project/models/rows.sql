{#- 100 000 predictions: score q = (i + 1/2)/N, label 1 when frac(i·φ) < q (a low-discrepancy
    draw of Bernoulli(q)), so that the score is calibrated #}
{%- set n = 100000 %}
select {{ index() }} as i,
  ({{ index() }} + 0.5) / {{ n }} as q,
  case when {{ index() }} * 0.6180339887498949 - floor({{ index() }} * 0.6180339887498949)
    < ({{ index() }} + 0.5) / {{ n }} then 1 else 0 end as label,
  case when {{ index() }} - 2 * floor({{ index() }} / 2) = 0 then 'a' else 'b' end as segment
from {{ integers(n) }}
