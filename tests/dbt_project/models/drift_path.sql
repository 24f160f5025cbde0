-- the change detector's daily path per segment, for comparison with sqlcal.detect
{{ sqlcal.calibration_change_path(ref("drift_sum_cells"), ref("drift_snapshots")) }}
