-- a NULL score among calibrated rows: the test reports the group whatever the metric's value
select segment, score, label from {{ ref('calibrated') }}
union all
select 'a' as segment, null as score, 1 as label
