"""Known populations for the intervals' coverage studies (tests/test_intervals.py, and the larger
bench/intervals.py): their exact population values, samples with and without weights, and
summaries summed in numpy from the sampled rows (independent of the engine's reductions).

Populations (score density f, true rate g(p) = P(y = 1 | p)):

- ``calibrated``: p ~ Beta(2, 2), g(p) = p;
- ``overconfident``: p ~ Beta(2, 2), g = σ(0.6·logit p) (scores too far from 1/2);
- ``lowrate``: p ~ Beta(1, 30) (base rate about 3%), g(p) = 1.1·p (under-predicting).

Weights:

- ``none``;
- ``sampling``: population rows kept with probability π = 0.2 + 0.6p + 0.2y (Poisson
  sampling that depends on the label), weight 1/π;
- ``frequency``: the scores on a grid of 40 values; the sample's distinct (p, y) rows, each
  weighted by its count (whole-number weights that are repeated rows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import integrate, stats

BINS = 15
POPULATIONS = ("calibrated", "overconfident", "lowrate")
GRID = (np.arange(40) + 0.5) / 40


def _shape(kind: str):
    if kind == "calibrated":
        return (2, 2), lambda p: p
    if kind == "overconfident":
        return (2, 2), lambda p: 1 / (1 + np.exp(-0.6 * np.log(p / (1 - p))))
    if kind == "lowrate":
        return (1, 30), lambda p: 1.1 * p
    raise ValueError(kind)


def _expect(kind: str, h, lo: float = 0.0, hi: float = 1.0, discrete: bool = False) -> float:
    """E[h(p, g(p)) 1{lo <= p < hi}] under the population's score law (discrete: the grid)."""
    (a, b), g = _shape(kind)
    if discrete:
        mass = _grid_mass(kind)
        inside = (GRID >= lo) & (GRID < hi)
        return float(np.sum(mass[inside] * h(GRID[inside], g(GRID[inside]))))
    f = stats.beta(a, b).pdf
    return integrate.quad(lambda p: h(p, g(p)) * f(p), lo, hi, limit=400, epsabs=1e-13)[0]


def _grid_mass(kind: str) -> np.ndarray:
    (a, b), _ = _shape(kind)
    edges = np.linspace(0, 1, len(GRID) + 1)
    return np.diff(stats.beta(a, b).cdf(edges))


def truth(kind: str, metric: str, discrete: bool = False) -> float:
    """The population value of ``metric`` (ece, rmsce, mce on 15 equal-width bins; brier,
    log_loss, citl; cutoff: the cutoff calibration error)."""
    E = lambda h, lo=0.0, hi=1.0: _expect(kind, h, lo, hi, discrete)
    if metric == "brier":
        return E(lambda p, g: g * (1 - p) ** 2 + (1 - g) * p ** 2)
    if metric == "log_loss":
        return E(lambda p, g: -(g * np.log(p) + (1 - g) * np.log(1 - p)))
    if metric == "citl":
        return E(lambda p, g: p - g)
    if metric == "cutoff":
        return cutoff_truth(kind, discrete)
    edges = np.linspace(0, 1, BINS + 1)
    edges[-1] = 1 + 1e-12
    gap = np.array([E(lambda p, g: g - p, lo, hi) for lo, hi in zip(edges[:-1], edges[1:])])
    mass = np.array([E(lambda p, g: np.ones_like(p), lo, hi)
                     for lo, hi in zip(edges[:-1], edges[1:])])
    live = mass > 1e-12
    if metric == "ece":
        return float(np.abs(gap).sum())
    if metric == "rmsce":
        return float(np.sqrt(np.sum(gap[live] ** 2 / mass[live])))
    return float(np.max(np.abs(gap[live] / mass[live])))


def sample(kind: str, n: int, rng: np.random.Generator, weights: str = "none"):
    """Rows (p, y, w) of about ``n`` rows from the population (see the module's notes)."""
    (a, b), g = _shape(kind)
    if weights == "frequency":
        p = rng.choice(GRID, size=n, p=_grid_mass(kind) / _grid_mass(kind).sum())
        y = (rng.random(n) < g(p)).astype(float)
        rows = pd.DataFrame({"p": p, "y": y}).value_counts().reset_index(name="w")
        return (rows["p"].to_numpy(float), rows["y"].to_numpy(float),
                rows["w"].to_numpy(float))
    if weights == "sampling":
        N = int(n * 2)
        p = rng.beta(a, b, N)
        y = (rng.random(N) < g(p)).astype(float)
        pi = 0.2 + 0.6 * p + 0.2 * y
        keep = rng.random(N) < pi
        return p[keep], y[keep], 1 / pi[keep]
    p = rng.beta(a, b, n)
    return p, (rng.random(n) < g(p)).astype(float), np.ones(n)


def moments(key: np.ndarray, size: int, p, y, w, v) -> dict:
    """The sums of a summary, per key (numpy on the rows): n, W, Σwy, Σwp, Σwyp, Σwp², Σwy²,
    and the variance weight's Σv, Σvy, Σvp, Σvy², Σvyp, Σvp²."""
    s = lambda z: np.bincount(key, z, size)
    return {"n": np.bincount(key, minlength=size), "W": s(w), "swy": s(w * y), "swp": s(w * p),
            "swyp": s(w * y * p), "swpp": s(w * p * p), "swyy": s(w * y * y),
            "sw2": s(v), "sw2y": s(v * y), "sv_p": s(v * p), "sv_yy": s(v * y * y),
            "sv_yp": s(v * y * p), "sv_pp": s(v * p * p)}


def bins_frame(p, y, w, v) -> pd.DataFrame:
    """The 15 equal-width bins summary of the rows, with second moments."""
    k = np.minimum((p * BINS).astype(int), BINS - 1)
    frame = pd.DataFrame({"bin": np.arange(BINS), **moments(k, BINS, p, y, w, v)})
    return frame[frame["n"] > 0].reset_index(drop=True)


def totals_frame(p, y, w, v) -> pd.DataFrame:
    """The totals summary of the rows with the delta method's sums."""
    r = y - p
    loss = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    out = {k: [float(np.sum(x))] for k, x in moments(np.zeros(len(p), int), 1, p, y, w, v)
           .items()}
    out |= {"sw_sq_resid": [np.sum(w * r * r)], "sw_r4": [np.sum(w * r ** 4)],
            "sv_r4": [np.sum(v * r ** 4)], "sw_logloss": [np.sum(w * loss)],
            "sw_logloss_sq": [np.sum(w * loss * loss)], "sw2_logloss": [np.sum(v * loss)],
            "sw2_logloss_sq": [np.sum(v * loss * loss)], "n_infinite_logloss": [0]}
    return pd.DataFrame(out)


def paired_frame(p, q, y, w, v, bins: int = BINS) -> pd.DataFrame:
    """The paired comparison's summary of rows scored p (model) and q (baseline), summed in
    numpy: per ``pair`` = bin(p)·(B + 1) + bin(q), the moments of (1, y, p, q) under w and v,
    the Brier and log-loss differences' sums."""
    K = bins + 1
    pair = np.minimum((p * bins).astype(int), bins - 1) * K + np.minimum((q * bins)
                                                                          .astype(int), bins - 1)
    size = K * K
    loss = lambda s: -(y * np.log(s) + (1 - y) * np.log(1 - s))
    d = (y - p) ** 2 - (y - q) ** 2
    e = loss(p) - loss(q)
    terms = {"": np.ones_like(p), "y": y, "p": p, "q": q, "yy": y * y, "yp": y * p, "yq": y * q,
             "pp": p * p, "pq": p * q, "qq": q * q, "d": d, "dd": d * d, "e": e, "ee": e * e}
    out = {"pair": np.arange(size), "n": np.bincount(pair, minlength=size),
           "n_inf": np.zeros(size, int)}
    for name, z in terms.items():
        out["sw" + name] = np.bincount(pair, w * z, size)
        out["sv" + name] = np.bincount(pair, v * z, size)
    out["swl"] = np.bincount(pair, w * loss(p), size)
    out["swm"] = np.bincount(pair, w * loss(q), size)
    frame = pd.DataFrame(out)
    return frame[frame["n"] > 0].reset_index(drop=True)


def cutoff_truth(kind: str, discrete: bool = False) -> float:
    """The population's cutoff calibration error: the range of S(t) = E[(y − p)1{p <= t}]
    (S = 0 below every score included). g(p) − p changes sign at most at 1/2 in these
    populations (calibrated: never; over-confident: at 1/2; low base rate: never), so the
    range is read from S at 1/2 and at 1 (on the grid: from S at every grid point)."""
    (a, b), g = _shape(kind)
    if discrete:
        walk = np.cumsum(_grid_mass(kind) * (g(GRID) - GRID))
        return float(max(walk.max(), 0.0) - min(walk.min(), 0.0))
    f = stats.beta(a, b).pdf
    gap = lambda lo, hi: integrate.quad(lambda p: (g(p) - p) * f(p), lo, hi, limit=400,
                                        epsabs=1e-14)[0]
    half = gap(0.0, 0.5)
    walk = np.array([0.0, half, half + gap(0.5, 1.0)])
    return float(walk.max() - walk.min())


def cells_frame(p, y, w, v, grid: int = 1024) -> pd.DataFrame:
    """The score-cell histogram of the rows (cell = min(floor(p·grid), grid − 1)), with
    ``p_min``, ``p_max`` and the second moments, summed in numpy."""
    k = np.minimum(np.floor(p * grid), grid - 1).astype(int)
    frame = pd.DataFrame({"cell": np.arange(grid), **moments(k, grid, p, y, w, v)})
    lo, hi = np.full(grid, np.inf), np.full(grid, -np.inf)
    np.minimum.at(lo, k, p)
    np.maximum.at(hi, k, p)
    frame["p_min"], frame["p_max"] = lo, hi
    return frame[frame["n"] > 0].reset_index(drop=True)


def walk_extremes(p, y, w) -> dict:
    """The exact extremes of the running residual sum over the distinct scores (brute force
    on the sorted rows, ties one unit): ``W``, ``s_max``, ``s_min`` (without S₀), a score at
    each, ``grid_bound`` 0."""
    u, at = np.unique(p, return_inverse=True)
    S = np.cumsum(np.bincount(at, w * (y - p), len(u)))
    i, j = int(np.argmax(S)), int(np.argmin(S))
    return {"W": float(w.sum()), "s_max": float(S[i]), "s_min": float(S[j]),
            "p_at_max": float(u[i]), "p_at_min": float(u[j]), "grid_bound": 0.0}


# -- LS-ECE: the logit grid summed in numpy, and the population value -------------------------


def logit_grid_frame(p, y, w, v, step: float, clip: float = 1e-6) -> pd.DataFrame:
    """LS-ECE's logit-grid summary of the rows summed in numpy (linear binning of the clipped
    logit, the curvature's masses, the interval's moments under w and under v)."""
    pc = np.clip(p, clip, 1 - clip)
    x = (np.log(pc) - np.log(1 - pc)) / step
    k = np.floor(x).astype(np.int64)
    h = x - k
    g = 1 - h
    cells, key = np.unique(k, return_inverse=True)
    s = lambda z: np.bincount(key, z, len(cells))
    out = {"k": cells, "n": np.bincount(key, minlength=len(cells)), "W": s(w)}
    for name, mass in (("m", w), ("y", w * y), ("v", w * g * h), ("vy", w * y * g * h)):
        out[f"{name}_lo"], out[f"{name}_hi"] = s(mass * g), s(mass * h)
    for prefix, weight in (("q", w), ("qv", v)):
        for name, z in (("", 1.0), ("y", y)):
            for ab, share in (("ll", g * g), ("lh", g * h), ("hh", h * h)):
                out[f"{prefix}{name}_{ab}"] = s(weight * z * share)
    return pd.DataFrame(out)


def truth_ls_ece(kind: str, sigma: float, discrete: bool = False, clip: float = 1e-6) -> float:
    """The population's LS-ECE at σ (Gaussian noise, scores clipped to [clip, 1 − clip]):
    ∫|E[(y − ρ(u))K_σ(u − z)]| du, z = logit(p), on a fine logit grid of spacing σ/100 (each
    cell's mass at its midpoint: error O(spacing²), 1e-7 against a direct sum at σ = 0.1; the
    kernel sums by FFT); the grid scores' 40 atoms summed directly."""
    from scipy import signal

    (a, b), g = _shape(kind)
    h = sigma / 100
    lo, hi = np.log(clip / (1 - clip)), np.log((1 - clip) / clip)
    edges = np.arange(lo - 10 * sigma, hi + 10 * sigma + h, h)
    z = (edges[:-1] + edges[1:]) / 2
    if discrete:  # 40 atoms: the kernel sums directly
        atoms, mass = np.log(GRID / (1 - GRID)), _grid_mass(kind)
        K = stats.norm.pdf(z[:, None] - atoms[None, :], scale=sigma) * mass[None, :]
        A = K @ g(GRID) - (1 / (1 + np.exp(-z))) * K.sum(axis=1)
        return float(np.abs(A).sum() * h)
    else:
        cdf = stats.beta(a, b).cdf(1 / (1 + np.exp(-np.clip(edges, lo, hi))))
        mass = np.diff(cdf)
        mass[np.searchsorted(edges, lo) - 1] += cdf[0]  # the clipped scores, at the ends
        mass[np.searchsorted(edges, hi) - 1] += 1 - cdf[-1]
        positive = mass * g(1 / (1 + np.exp(-z)))
    half = int(np.ceil(9 * sigma / h))
    kernel = stats.norm.pdf(np.arange(-half, half + 1) * h, scale=sigma)
    A = (signal.fftconvolve(positive, kernel, mode="same")
         - (1 / (1 + np.exp(-z))) * signal.fftconvolve(mass, kernel, mode="same"))
    return float(np.abs(A).sum() * h)
