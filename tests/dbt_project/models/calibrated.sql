select segment, q as score, label from {{ ref('rows') }}
