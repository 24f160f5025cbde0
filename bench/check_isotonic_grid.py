"""How far the grid isotonic fit (2^16 score cells) is from the exact one (one block per distinct
score), on the benchmark table: the largest difference of the two maps over the rows' scores, and
the Brier score of each recalibrated score (in-sample, so the exact fit's is the smallest any
non-decreasing map can reach).

    python bench/check_isotonic_grid.py bench/out/preds_10000000_10g.duckdb
"""

import sys

import ibis
import numpy as np

import sqlcal

con = ibis.duckdb.connect(sys.argv[1], read_only=True)
t = con.table("preds")
kw = dict(score="p", label="y", by="g")
grid = sqlcal.isotonic(t, **kw, method="grid")
exact = sqlcal.isotonic(t, **kw, method="exact")
print(f"grid: {len(grid.table)} blocks, mixed cells {grid.info['mixed_cells']}; "
      f"exact: {len(exact.table)} blocks")
rows = t.select("g", "p").execute()
diff = np.abs(grid.transform_frame(rows, "p") - exact.transform_frame(rows, "p"))
print(f"max |grid - exact| over the rows: {diff.max():.3g}; mean {diff.mean():.3g}")
b_grid = sqlcal.brier(grid.apply(t, "p"), score="calibrated", label="y", by="g")
b_exact = sqlcal.brier(exact.apply(t, "p"), score="calibrated", label="y", by="g")
b_raw = sqlcal.brier(t, **kw)
gap = (b_grid.brier - b_exact.brier).to_numpy()
print(f"Brier: raw {b_raw.brier.mean():.6f}, exact isotonic {b_exact.brier.mean():.6f}, "
      f"grid {b_grid.brier.mean():.6f}; per-group gap grid - exact: max {gap.max():.3g}, "
      f"relative to the raw-to-exact improvement {np.max(gap / (b_raw.brier - b_exact.brier)):.3g}")
