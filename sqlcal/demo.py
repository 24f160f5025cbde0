"""A realistic example table of logged predictions, for the README and the tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

# (model, segment) -> (slope, shift) of the true log-odds against the model's log-odds:
# slope < 1 means over-confident, shift > 0 means the model under-predicts.
MISCALIBRATION = {
    ("v1", "web"): (1.0, 0.0),
    ("v1", "ios"): (0.7, 0.0),
    ("v1", "android"): (1.0, 0.4),
    ("v1", "partner"): (1.3, -0.5),
    ("v2", "web"): (1.0, 0.0),
    ("v2", "ios"): (0.95, 0.0),
    ("v2", "android"): (1.0, 0.1),
    ("v2", "partner"): (1.1, -0.2),
}


def demo_frame(rows: int = 200_000, days: int = 14, seed: int = 0) -> pd.DataFrame:
    """Logged click predictions: two model versions, four segments, ``days`` days.

    ``rows`` events are drawn, then pre-aggregated as warehouses often store them: one row per
    (model, segment, day, score, label) with ``weight`` = the number of identical events, so the
    weight is a true frequency weight. Columns: ``model``, ``segment``, ``day`` (DATE), ``score``
    (the model's probability, rounded to 0.001 as a served model logs it), ``label`` (0/1 outcome),
    ``weight``. The partner segment drifts: its shift grows by 0.05 a day.
    """
    rng = np.random.default_rng(seed)
    keys = list(MISCALIBRATION)
    which = rng.integers(0, len(keys), rows)
    day = rng.integers(0, days, rows)
    score = np.round(1 / (1 + np.exp(-rng.normal(-1.2, 1.3, rows))), 3)
    logit = np.log(np.clip(score, 1e-4, 1) / np.clip(1 - score, 1e-4, 1))
    slope = np.array([MISCALIBRATION[k][0] for k in keys])[which]
    shift = np.array([MISCALIBRATION[k][1] for k in keys])[which]
    partner = np.array([k[1] == "partner" for k in keys])[which]
    shift = shift + np.where(partner, 0.05 * day, 0.0)
    true_p = 1 / (1 + np.exp(-(slope * logit + shift)))
    events = pd.DataFrame({
        "model": np.array([k[0] for k in keys])[which],
        "segment": np.array([k[1] for k in keys])[which],
        "day": (np.datetime64("2026-11-01") + day.astype("timedelta64[D]")).astype("datetime64[D]"),
        "score": score,
        "label": (rng.random(rows) < true_p).astype(np.int8),
    })
    keys = ["model", "segment", "day", "score", "label"]
    logged = events.groupby(keys, as_index=False).size().rename(columns={"size": "weight"})
    logged["weight"] = logged["weight"].astype(np.float64)
    return logged.sample(frac=1, random_state=seed, ignore_index=True)


def write_demo(path: str = "demo.duckdb", table: str = "predictions", **kwargs) -> str:
    """Write :func:`demo_frame` as a DuckDB table; returns the path."""
    import ibis

    import pyarrow as pa

    df = demo_frame(**kwargs)
    arrow = pa.Table.from_pandas(df, preserve_index=False)
    arrow = arrow.set_column(arrow.schema.get_field_index("day"), "day",
                             arrow["day"].cast(pa.date32()))
    con = ibis.duckdb.connect(path)
    con.create_table(table, arrow, overwrite=True)
    con.disconnect()
    return path
