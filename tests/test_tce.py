"""TCE against a per-prediction scipy binomtest loop, and PAVA-BC against the spec's worked
examples and a plainly written sequential version of the reference algorithm."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import sqlcal
from sqlcal import InvalidInputError
from sqlcal.metrics.tce import pavabc
from tests.conftest import calibration_data


def reference_pavabc(y, n_min, n_max):
    """The reference `_pavabc` as the spec writes it (§2.3.3), over points, with float means."""
    n = len(y)
    sums, sizes = [], []
    for i in range(n - n_min):
        sums.append(float(y[i]))
        sizes.append(1)
        while len(sizes) >= 2:
            s0, w0, s1, w1 = sums[-2], sizes[-2], sums[-1], sizes[-1]
            if w0 + w1 <= n_min or (w0 + w1 <= n_max and s0 / w0 >= s1 / w1):
                sums[-2:], sizes[-2:] = [s0 + s1], [w0 + w1]
            else:
                break
    if n_min > 0:
        sums.append(float(np.sum(y[n - n_min:])))
        sizes.append(n_min)
        if sizes[-1] + n_min <= n_max and len(sizes) >= 2:
            sums[-2:], sizes[-2:] = [sums[-2] + sums[-1]], [sizes[-2] + sizes[-1]]
    return sizes, sums


def sizes_of(starts, n):
    ends = list(starts[1:]) + [n]
    return [int(e - b) for b, e in zip(starts, ends)]


EXAMPLES = [  # spec seed001 §2.3.5: y sorted by score, (n_min, n_max), code sizes, paper sizes
    ("0 1 0 0 1 0 1 1 1 0 1 1", 2, 5, [4, 2, 6], [4, 2, 4, 2]),
    ("0 1 0 0 1 0 1 1 1 0 1 1", 0, 13, [1, 3, 2, 4, 2], [1, 3, 2, 4, 2]),
    ("0 1 0 0 1 0 1 1 1 0 1 1", 3, 6, [4, 3, 5], [4, 3, 5]),
    ("0 0 0 0 0 0 0 0 0 0 0 0", 2, 5, [5, 7], [5, 5, 2]),
    ("1 0 1 0 1 0 1 0 1 0", 2, 4, [4, 6], [4, 4, 2]),
    ("1 1 1 0 0 0 0 0 0 0", 1, 10, [10], [10]),
]


@pytest.mark.parametrize("labels, n_min, n_max, code, paper", EXAMPLES)
def test_pavabc_worked_examples(labels, n_min, n_max, code, paper):
    y = np.array(labels.split(), float)
    w = np.ones(len(y))
    assert sizes_of(pavabc(w, y, n_min, n_max, "code"), len(y)) == code
    assert sizes_of(pavabc(w, y, n_min, n_max, "paper"), len(y)) == paper


@pytest.mark.parametrize("seed", range(30))
def test_pavabc_equals_the_sequential_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    y = (rng.random(n) < np.sort(rng.random(n)) ** rng.uniform(0.5, 2)).astype(float)
    n_min = int(rng.integers(0, n // 3 + 1))
    n_max = int(rng.integers(max(n_min, 1), n + 2))
    want, _ = reference_pavabc(y, n_min, n_max)
    assert sizes_of(pavabc(np.ones(n), y, n_min, n_max), n) == want


def binomtest_loop(df, ids, alpha=0.05):
    """Rejected predictions per bin, one scipy binomtest per prediction."""
    out = {}
    for b in np.unique(ids):
        m = ids == b
        k, n = int(df.y[m].sum()), int(m.sum())
        out[b] = sum(stats.binomtest(k, n, q).pvalue <= alpha for q in df.p[m])
    return out


def positional_ids(p, bins):
    """The reference's quantile bins: sorted slices at ⌊kN/B⌋; tied runs join their first row."""
    n = len(p)
    order = np.argsort(p, kind="stable")
    ids = np.empty(n, int)
    ids[order] = (((np.arange(n) + 1) * bins - 1) // n)
    first = pd.Series(ids[order]).groupby(p[order]).transform("first").to_numpy()
    ids[order] = first
    return ids


@pytest.mark.parametrize("strategy", ["uniform", "quantile", "pavabc"])
@pytest.mark.parametrize("ties", [False, True])
def test_rejections_equal_a_binomtest_loop(upload, strategy, ties):
    df = calibration_data(2500, seed=3, ties=ties)
    got = sqlcal.tce_bins(upload(df), score="p", label="y", strategy=strategy)
    p = df.p.to_numpy()
    if strategy == "uniform":
        ids = np.digitize(p, np.linspace(0, 1, 11)[1:-1])
    elif strategy == "quantile":
        ids = positional_ids(p, 10)
    else:  # the bins sqlcal found; on tie-free data they are the reference's (test above)
        edges = got.score_min.to_numpy()[1:]
        ids = np.searchsorted(edges, p, side="right")
        if not ties:
            order = np.argsort(p)
            sizes, _ = reference_pavabc(df.y.to_numpy()[order], 2500 // 20, 2500 // 5)
            assert got.W.astype(int).tolist() == sizes
    want = binomtest_loop(df, ids)
    assert dict(zip(got.bin, got.rejected.astype(int))) == want
    total = sqlcal.tce(upload(df), score="p", label="y", strategy=strategy).iloc[0]
    assert total.tce == pytest.approx(100 * sum(want.values()) / len(df), abs=1e-12)


def test_an_island_of_acceptance_is_counted(upload):
    # one bin with (k, n) = (29, 2501): accepted scores are [0.0079213, 0.0165385] ∪
    # [0.0165846, 0.0167209] (spec §1.5); predictions in the gap and in the island
    rng = np.random.default_rng(4)
    p = np.concatenate([np.full(100, 0.01), rng.uniform(0.01653, 0.01673, 2401)])
    y = np.zeros(2501, int)
    y[:29] = 1
    df = pd.DataFrame({"p": p, "y": y})
    got = sqlcal.tce_bins(upload(df), score="p", label="y", strategy="uniform", bins=1).iloc[0]
    want = sum(stats.binomtest(29, 2501, q).pvalue <= 0.05 for q in p)
    assert got.rejected == want and 0 < want < 2401
    assert len(got.accepted) == 2


def test_weights_are_counts(upload):
    df = calibration_data(1500, seed=5, groups=2)
    df["w"] = np.random.default_rng(5).integers(1, 4, len(df)).astype(float)
    expanded = df.loc[df.index.repeat(df.w.astype(int))].drop(columns="w")
    for strategy in ("uniform", "quantile", "pavabc"):
        a = sqlcal.tce(upload(df), score="p", label="y", weight="w", by="g", strategy=strategy)
        b = sqlcal.tce(upload(expanded), score="p", label="y", by="g", strategy=strategy)
        np.testing.assert_allclose(a.tce, b.tce, rtol=1e-12)
    with pytest.raises(InvalidInputError, match="whole-number weights"):
        sqlcal.tce(upload(df.assign(w=df.w / 2)), score="p", label="y", weight="w")


def test_ttest_variant_equals_ttest_1samp(upload):
    df = calibration_data(2000, seed=6)
    got = sqlcal.tce_bins(upload(df), score="p", label="y", strategy="quantile", test="ttest")
    ids = positional_ids(df.p.to_numpy(), 10)
    for b in range(10):
        labels = df.y[ids == b].to_numpy(float)
        want = sum(stats.ttest_1samp(labels, q).pvalue <= 0.05 for q in df.p[ids == b])
        assert got.rejected[b] == want


def test_soft_labels_and_bad_options_are_refused(upload):
    df = calibration_data(200, seed=7)
    soft = upload(df.assign(y=np.where(df.y == 1, 0.9, 0.1)))
    with pytest.raises(InvalidInputError, match="TCE needs labels in {0, 1}"):
        sqlcal.tce(soft, score="p", label="y", soft_labels=True)
    with pytest.raises(ValueError, match="strategy must be one of"):
        sqlcal.tce(upload(df), score="p", label="y", strategy="ntile")
    with pytest.raises(ValueError, match="n_min .* must not exceed n_max"):
        sqlcal.tce(upload(df), score="p", label="y", n_min=50, n_max=10)


def test_tce_grows_with_n_for_a_calibrated_model(upload):
    # the paper's Table 12 effect, with bins as fractions of N
    rng = np.random.default_rng(8)
    values = []
    for n in (2_000, 50_000):
        p = rng.uniform(0.05, 0.95, n)
        df = pd.DataFrame({"p": p, "y": (rng.random(n) < p).astype(int)})
        values.append(sqlcal.tce(upload(df), score="p", label="y").tce.iloc[0])
    assert values[1] > values[0] + 5


def test_paper_tail_rule_keeps_bins_within_n_max_with_tied_tails():
    # review finding: a tied tail weighs more than n_min
    W = np.array([1.0] * 8 + [3.0])
    starts = pavabc(W, np.zeros(9), 2, 5, "paper")
    sizes = np.add.reduceat(W, starts)
    assert sizes.max() <= 5


def test_bin_sizes_must_be_counts(upload):
    df = calibration_data(100, seed=9)
    with pytest.raises(ValueError, match="n_min must be a whole number"):
        sqlcal.tce(upload(df), score="p", label="y", n_min=2.5, n_max=10)
