-- every metric of the generic test on the seed, weighted and by segment, and unweighted overall
{%- set metrics = ["ece", "mce", "citl", "brier", "log_loss", "spiegelhalter_z", "cutoff_error"] %}
{%- for m in metrics %}
select 'weighted' as variant, segment, metric, value, lower, upper, n,
  {{ adapter.quote("W") }} as w_total
from ({{ sqlcal.calibration_values(ref('predictions'), 'score', 'label', m, weight='weight',
                                   by=['segment'], bins=10, cells=256) }}) v{{ loop.index }}
union all
select 'unweighted' as variant, null as segment, metric, value, lower, upper, n,
  {{ adapter.quote("W") }}
from ({{ sqlcal.calibration_values(ref('predictions'), 'score', 'label', m, bins=10,
                                   cells=256) }}) u{{ loop.index }}
{{ "union all" if not loop.last }}
{%- endfor %}
