"""On demand (about 3 minutes): TCE's rejections per bin against a per-prediction scipy binomtest
loop at 10^5 rows, for the three strategies, with and without ties (the issue's parity check; CI
runs the same comparison at 2,500 rows). Run from the repository root:

    python bench/check_tce_1e5.py
"""
import os
import sys
import time

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import sqlcal  # noqa: E402
from tests.conftest import calibration_data  # noqa: E402
from tests.test_tce import positional_ids  # noqa: E402

for ties in (False, True):
    df = calibration_data(100_000, seed=11, ties=ties)
    p = df.p.to_numpy()
    for strategy in ("uniform", "quantile", "pavabc"):
        t0 = time.time()
        got = sqlcal.tce_bins(df, score="p", label="y", strategy=strategy)
        t1 = time.time()
        if strategy == "uniform":
            ids = np.digitize(p, np.linspace(0, 1, 11)[1:-1])
        elif strategy == "quantile":
            ids = positional_ids(p, 10)
        else:
            ids = np.searchsorted(got.score_min.to_numpy()[1:], p, side="right")
        # dedupe (bin, q) pairs for the loop: the decision depends on (k, n, q) only
        frame = pd.DataFrame({"b": ids, "q": p, "y": df.y})
        kn = frame.groupby("b").y.agg(["sum", "count"])
        pairs = frame.groupby(["b", "q"]).size().reset_index(name="c")
        rej = {}
        for b, q, c in pairs.itertuples(index=False):
            k, n = int(kn.loc[b, "sum"]), int(kn.loc[b, "count"])
            if stats.binomtest(k, n, q).pvalue <= 0.05:
                rej[b] = rej.get(b, 0) + c
        want = {b: rej.get(b, 0) for b in kn.index}
        ok = dict(zip(got.bin, got.rejected.astype(int))) == want
        print(f"ties={ties} {strategy}: equal={ok} sqlcal {t1-t0:.1f}s loop {time.time()-t1:.1f}s "
              f"pairs={len(pairs)} tce={100*sum(want.values())/len(p):.4f}", flush=True)
