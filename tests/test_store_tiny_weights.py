"""Tiny sampling weights in the summary store (issue 34): a stored w²-sum takes w² as the scans'
variance weight does, 0 below TINY = 2^-511 (sqlcal.query.reductions.square), so a
snapshot of weights down to 1e-300 runs on PostgreSQL (which raises "value out of range:
underflow" where a product of non-zero doubles rounds to 0) and a stored window's intervals are a
scan's on every engine.

Oracles: every stored sum of every table against brute-force numpy over the raw rows, each
declared term (sqlcal.query.declared.STORE_SUMS) evaluated from its factors written out here in
numpy with w² under the same rule; every metric and interval of a stored window against a scan of
the window's rows.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import sqlcal
from sqlcal.monitor import schema
from sqlcal.query.declared import factors, store_sums
from tests.test_stored_intervals import (
    LS_ECE,
    METRICS,
    assert_equal,
    drop_store,
    interval_columns,
    store_for,
)

DAY0 = pd.Timestamp("2026-10-01")
TINY = 2.0 ** -511
#: the snapshot's grids: 2^10 cells, 15 bins, LS-ECE's logit grid of σ = 0.1 (step σ/20)
CELLS, BINS, SIGMA, CLIP = 2**10, 15, 0.1, 1e-6
OPTS = dict(score="p", label="y", weight="w", by="g", time="t", as_of="2027-01-01",
            cells=CELLS, bins=(BINS,), ls_ece_sigma=(SIGMA,), smooth_grids=(), levels=True)
#: a stored sum of terms below 2^-1022 is exact only to the subnormal grid: a few of its steps
SUBNORMAL = 8 * 2.0 ** -1074


def tiny_rows(n: int = 900, days: int = 3, seed: int = 34) -> pd.DataFrame:
    """Two groups over ``days`` days; half the weights log-uniform over 1e-300..1e3 (with
    2^-511, the weights just below it, 1e-162 whose square rounds to 0, and 1e-300), half of
    ordinary size; scores of three decimals (tied levels) in [0.02, 0.98], and on eight rows of
    ordinary weight scores from 1e-100 to 1e-80, whose p⁴ (the Brier score's interval) is
    subnormal or 0 (on PostgreSQL an "underflow")."""
    rng = np.random.default_rng(seed)
    p = np.round(rng.uniform(0.02, 0.98, n), 3)
    y = (rng.random(n) < p).astype(np.int64)
    w = rng.uniform(0.2, 3.0, n)
    spread = rng.random(n) < 0.5
    w[spread] = 10.0 ** rng.uniform(-300, 3, spread.sum())
    edges = [TINY, np.nextafter(TINY, 0), 2.0 ** -512, 2.0 ** -537, 1e-162, 1e-200, 1e-300]
    w[:2 * len(edges)] = edges * 2  # each edge in both groups (the first rows alternate)
    ordinary = np.flatnonzero(~spread & (np.arange(n) >= 2 * len(edges)))[:8]
    p[ordinary] = [1e-100, 1e-82, 2.0 ** -269, 1e-80] * 2
    t = DAY0 + pd.to_timedelta(rng.integers(0, days * 86400, n), unit="s")
    return pd.DataFrame({"p": p, "y": y, "w": w, "g": np.where(np.arange(n) % 2, "b", "a"),
                         "t": pd.Series(t)})


# -- the oracle: each declared term in numpy, from the raw rows ------------------------------


def row_factors(p: np.ndarray, y: np.ndarray, w: np.ndarray, f: np.ndarray | None) -> dict:
    """The named factors of a stored term (StoredSum's docstring), written out in numpy; ``f``
    the row's position in its logit cell (the logit table's ``lo`` = 1 − f, ``hi`` = f)."""
    pc = np.clip(p, 1 / (1 + np.exp(4.0)), 1 / (1 + np.exp(-4.0)))
    h = np.log(pc / (1 - pc)) / 4  # clip(logit p, −4, 4)/4
    out = {"w": w, "y": y, "p": p, "pq": p * (1 - p), "q2": (1 - 2 * p) ** 2,
           "lnp": np.log(np.where(p > 0, p, 1.0)), "lnq": np.log(np.where(p < 1, 1 - p, 1.0)),
           "h": h, "d4": (1 - p) ** 4 - p ** 4,
           "p4": np.where(p * p < TINY, 0.0, (p * p) ** 2)}
    if f is not None:
        out |= {"lo": 1 - f, "hi": f}
    return out


def term(of: tuple, named: dict) -> np.ndarray:
    """A row's term: w² by the scans' rule (0 below 2^-511) when w is a factor twice, then the
    other factors left to right."""
    flat = factors(of)
    value = np.ones_like(named["p"])
    if flat.count("w") == 2:
        w = named["w"]
        value = np.where(w < TINY, 0.0, w * w)
        flat = [x for x in flat if x != "w"]
    for x in flat:
        value = value * named[x]
    return value


def oracle(df: pd.DataFrame, kind: str) -> list[pd.DataFrame]:
    """Per group, day, delay (-1: the label-free sums of every row; -2: the label sums of the
    positives, whose arrival is unknown) and the table's key, each stored sum of ``kind``, and
    for the logit grid its rounding ``<name>_atol``: a row's position f in its cell is x − k with
    x = logit(p)/step, which an engine's logarithm (Spark's is Java's) may give a few units of
    x's last place away from numpy's, so its term a·b (a, b ∈ {1 − f, f}: |d(ab)/df| <= 2)
    moves by up to 2·|v·z|·4·ulp(x)."""
    p, y, w = df.p.to_numpy(float), df.y.to_numpy(float), df.w.to_numpy(float)
    f = key = slack = None
    if kind == "cells":
        key = np.minimum(np.floor(p * CELLS), CELLS - 1)
    elif kind == "bins":
        key = np.minimum(np.floor(p * BINS), BINS - 1)
    elif kind == "levels":
        key = p
    elif kind == "logit":
        pc = np.clip(p, CLIP, 1 - CLIP)
        x = (np.log(pc) - np.log(1 - pc)) / (SIGMA / 20)  # as written: ln(1 − p), not log1p
        key = np.floor(x)
        f = x - key
        slack = 2 * 4 * np.spacing(np.abs(x))
    named = row_factors(p, y, w, f)
    base = pd.DataFrame({"g": df.g.to_numpy(), "day": df.t.dt.floor("D").to_numpy(),
                         "key": 0.0 if key is None else key})
    frames = []
    for delay, label, rows in ((schema.DELAY_LABEL_FREE, False, np.ones(len(df), bool)),
                               (schema.DELAY_UNKNOWN, True, y == 1)):
        sums = store_sums(kind, label=label)
        cols = {}
        for s in sums:
            if not s.of:
                hit = np.ones(len(df), bool)
                for name, value in s.where:
                    hit &= named[name] == value
                cols[s.name] = hit.astype(float)
            else:
                cols[s.name] = term(s.of, named)
                if slack is not None:
                    cols[f"{s.name}_atol"] = np.abs(term(tuple(
                        x for x in s.of if x not in ("lo", "hi")), named)) * slack
        frame = base.assign(**cols)[rows]
        how = {c: next((s.merge for s in sums if s.name == c), "sum") for c in cols}
        frames.append(frame.groupby(["g", "day", "key"]).agg(how).reset_index()
                      .assign(delay=delay))
    return frames


def stored_rows(store, prefix: str, kind: str, delay: int) -> pd.DataFrame:
    frame = store.table(schema.table_name(kind, prefix)).to_pandas()
    frame = frame[frame["delay"] == delay].rename(columns={"key_g": "g", "period_start": "day"})
    frame["day"] = pd.to_datetime(frame["day"]).astype("datetime64[ns]")
    key = [c for c, _ in schema.TABLES[kind]["keys"]]
    frame["key"] = frame[key[0]].astype(float) if key else 0.0
    return frame.sort_values(["g", "day", "key"], ignore_index=True)


@pytest.fixture
def tiny_store(con, upload):
    """The rows, and a store of their snapshot (on the engine under test: PostgreSQL's in the
    server)."""
    df = tiny_rows()
    store, prefix = store_for(con)
    try:
        out = sqlcal.snapshot(upload(df), store=store, prefix=prefix, **OPTS)
        assert (out["status"] == "written").all()
        yield df, store, prefix
    finally:
        if store is con:
            drop_store(store, prefix)


def test_every_stored_sum_equals_numpy_with_w2_zero_below_the_tiny_weight(tiny_store):
    """Each stored sum of the totals, cells, bins, levels and the logit grid, label-free and per
    positive, equals numpy's over the raw rows to 1e-12 relative (w² of a weight below 2^-511
    taken as 0, as the scans take it)."""
    df, store, prefix = tiny_store
    assert (df.w < TINY).any() and (df.w == TINY).any() and (df.w > 100).any()
    for kind in ("totals", "cells", "bins", "levels", "logit"):
        for want in oracle(df, kind):
            delay = int(want["delay"].iloc[0])
            got = stored_rows(store, prefix, kind, delay)
            want = want.sort_values(["g", "day", "key"], ignore_index=True)
            what = f"{kind} delay {delay}"
            assert len(got) == len(want), what
            for col in ("g", "day", "key"):
                assert (got[col].to_numpy() == want[col].to_numpy()).all(), (what, col)
            for s in store_sums(kind, label=delay == schema.DELAY_UNKNOWN):
                x, y = got[s.name].to_numpy(float), want[s.name].to_numpy(float)
                atol = SUBNORMAL + want.get(f"{s.name}_atol", 0.0)
                bad = ~(np.abs(x - y) <= 1e-12 * np.abs(y) + atol)
                assert not bad.any(), (what, s.name, x[bad][:5], y[bad][:5])
    # the w²-sums of a weight below 2^-511 are 0: a level holding only such rows stores 0
    levels = stored_rows(store, prefix, "levels", schema.DELAY_LABEL_FREE)
    alone = df.groupby(["g", "p"]).w.max() < TINY
    assert alone.any()
    tiny_levels = levels.set_index(["g", "p"]).loc[alone[alone].index]
    assert (tiny_levels[["sw2", "sw2_pq"]].to_numpy() == 0).all()


def test_a_stored_window_of_tiny_weights_gives_a_scans_intervals(tiny_store):
    """Sampling weights down to 1e-300: every metric and interval of a stored window equals a
    scan of its rows (1e-9 relative), LS-ECE's included."""
    df, store, prefix = tiny_store
    first, last = DAY0, DAY0 + pd.Timedelta(days=1)
    src = sqlcal.stored(store, prefix=prefix, start=first, end=last)
    raw = df[df.t < last + pd.Timedelta(days=1)]
    scan = sqlcal.source(raw, score="p", label="y", weight="w", by="g")
    for name, metric in {**METRICS, **LS_ECE}.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no interval left out
            # log-uniform weights put most of a group's weight in one bin: said, and equal
            warnings.filterwarnings("ignore", ".*more than half their weight")
            got, want = metric(src), metric(scan)
        columns = interval_columns(want)
        assert columns and want[columns].notna().all().all(), name
        assert set(want["weight_kind"]) == {"sampling"}, name
        assert_equal(got, want, f"tiny weights: {name}")
