-- the change detector per segment (alarm day, change day), for comparison with sqlcal.detect
{{ sqlcal.calibration_change_values(ref("drift_sum_cells"), ref("drift_snapshots")) }}
