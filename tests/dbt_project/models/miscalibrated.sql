-- the same labels, scored q²: overconfident low, ECE ≈ 1/6, CITL ≈ −1/6, Brier 1/5 (not 1/6)
select segment, q * q as score, label from {{ ref('rows') }}
