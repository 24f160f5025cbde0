r"""An anytime-valid calibration change detector on per-day summaries (e-detector).

The finish is a pure numpy function of per-day, per-bet-bin sums (:func:`detector`): for each day
t and bet bin b the weight ``W``, ``swy`` = Σwy, ``swp`` = Σwp and ``swpp`` = Σwp², which the
summary store holds per score cell (:mod:`sqlcal.monitor.schema`) and which add over the cells of
a bin. :func:`detect` reads them from the store and runs the finish per group.

**Null.** For every row, given its score and the past days, :math:`|E[y \mid p] - p| \le
\varepsilon(p) = \varepsilon_a + \varepsilon_r p`, the labels of a day conditionally independent
given their scores. With :math:`X = \pm(y - p) - \varepsilon(p) \le 1` and a bet
:math:`\lambda \ge 0`, :math:`e^{\lambda x} \le 1 + \lambda x + \psi(\lambda) x^2` for
:math:`x \le 1` (:math:`\psi(u) = e^u - 1 - u`; Bennett 1962) and
:math:`E[X^2] \le p(1-p) + \varepsilon + 4\varepsilon^2` give
:math:`E[\exp(\lambda X - \psi(\lambda)(p(1-p) + \varepsilon + 4\varepsilon^2))] \le 1`. With
a bet constant on each bet bin and fixed before the day, the product over a day's rows is an
e-value whose logarithm is a function of four sums per bin:

.. math:: \log e_t = \sum_b \lambda_{tb} S_{tb} - |\lambda_{tb}| E_{tb}
          - \psi(|\lambda_{tb}|)(V_{tb} + E_{tb} + 4 E2_{tb})

(:math:`S = swy - swp`, :math:`V = swp - swpp`, :math:`E = \varepsilon_a W + \varepsilon_r swp`,
:math:`E2 = \varepsilon_a^2 W + 2\varepsilon_a\varepsilon_r swp + \varepsilon_r^2 swpp`).

**Bets** (predictable plug-in): over the m days before t, the mean residual beyond tolerance
:math:`\tilde\Delta` and the variance term :math:`\tilde\sigma^2` give the Kelly bet
:math:`\lambda^* = \mathrm{sign}(\tilde\Delta)\log(1 + |\tilde\Delta| / \tilde\sigma^2)`; the
detector bets :math:`\kappa\lambda^*` (κ = 1/2), capped at 1. A stable model within tolerance
has :math:`\tilde\Delta = 0`, so it bets nothing and its e-values are 1.

**Detector** (Shin, Ramdas & Rinaldo 2022, e-detectors): the CUSUM recursion
:math:`\log M_t = \log e_t + \max(\log M_{t-1}, 0)` per plug-in window m, and the average of
the windows' :math:`M_t` (an average of e-detectors is an e-detector). Alarm when
:math:`M_t \ge c = T/\alpha`: for an e-detector :math:`E[M_\tau] \le E[\tau]` for every stopping
time, so with :math:`\tau' = \min(\tau_c, T)`, Markov's inequality gives
:math:`P(\tau_c \le T) \le E[M_{\tau'}]/c \le T/c = \alpha`, finite-sample.

**Late labels.** Day t's e-value is computed once its labels are mature. An early stream at lag a
tests "calibrated within tolerance *and* the share of positives known at age a is F_b" with the
mean :math:`F_b p`, variance :math:`F_b p - F_b^2 p^2` and tolerance
:math:`(F_b + u_b)\varepsilon(p) + u_b p` (``share``, ``share_error``; linear in p, so its sums
stay exact).
"""

from __future__ import annotations

import numpy as np

#: the default plug-in windows (days): fast reaction and power for small persistent changes
WINDOWS = (3, 7, 28)
#: the default tolerance (absolute, relative): |E[y | p] − p| <= 0 + 0.10·p
TOLERANCE = (0.0, 0.10)


def threshold(alpha: float = 0.05, horizon: int = 365) -> float:
    """log c, c = horizon / alpha: P(any false alarm within ``horizon`` checks) <= alpha.

    Examples
    --------
    >>> round(threshold(0.05, 365), 4)
    8.8956
    """
    return float(np.log(horizon / alpha))


def day_statistics(W, swy, swp, swpp, *, tolerance=TOLERANCE, share=None, share_error=None
                   ) -> dict:
    """The per-day, per-bin statistics of the bet (S, V, E, E2) from the stored sums.

    All arguments are arrays of one shape (..., days, bins). ``share`` (F_b) and ``share_error``
    (u_b), broadcastable to that shape, turn the null into the early stream's (module notes).

    Examples
    --------
    >>> s = day_statistics(100.0, 30.0, 20.0, 5.0, tolerance=(0.0, 0.1))
    >>> [round(float(s[k]), 12) for k in ("S", "V", "E", "E2")]
    [10.0, 15.0, 2.0, 0.05]
    """
    W, swy, swp, swpp = (np.asarray(x, dtype=float) for x in (W, swy, swp, swpp))
    eps_abs, eps_rel = tolerance
    if share is not None:
        f = np.asarray(share, dtype=float)
        u = 0.0 if share_error is None else np.asarray(share_error, dtype=float)
        eps_abs, eps_rel = (f + u) * eps_abs, (f + u) * eps_rel + u
        mean, var = f * swp, np.maximum(f * swp - f * f * swpp, 0.0)
    else:
        mean, var = swp, swp - swpp
    return {"W": W, "S": swy - mean, "V": var,
            "E": eps_abs * W + eps_rel * swp,
            "E2": eps_abs ** 2 * W + 2 * eps_abs * eps_rel * swp + eps_rel ** 2 * swpp}


def bets(stats: dict, window: int, *, kappa: float = 0.5, cap: float = 1.0) -> np.ndarray:
    """The predictable plug-in bet λ per day and bin from the ``window`` days before each day.

    λ = 0 on the first ``window`` days and wherever the window's excess over tolerance is 0.

    Examples
    --------
    >>> s = day_statistics(np.full((4, 1), 100.0), np.full((4, 1), 30.0),
    ...                    np.full((4, 1), 20.0), np.full((4, 1), 5.0))
    >>> bets(s, 2)[:, 0].round(4).tolist()
    [0.0, 0.0, 0.191, 0.191]
    """
    def past(x):  # Σ over days t−window .. t−1, along the days axis (−2)
        c = np.cumsum(x, axis=-2)
        c = np.concatenate([np.zeros_like(c[..., :1, :]), c], axis=-2)
        out = np.zeros_like(x)
        if x.shape[-2] > window:
            out[..., window:, :] = c[..., window:-1, :] - c[..., :-window - 1, :]
        return out
    W, S, V, E, E2 = (past(stats[k]) for k in ("W", "S", "V", "E", "E2"))
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.sign(S) * np.maximum(np.abs(S) - E, 0.0) / W
        spread = (V + E + 4 * E2) / W
        lam = np.sign(excess) * np.log1p(np.abs(excess) / spread)
    lam = np.where((W > 0) & (spread > 0) & np.isfinite(lam), lam, 0.0)
    return np.clip(kappa * lam, -cap, cap)


def log_e(stats: dict, lam: np.ndarray) -> np.ndarray:
    """log e_t: the day's log e-value, summed over bins (shape (..., days)).

    Examples
    --------
    >>> s = day_statistics(np.array([[100.0]]), np.array([[30.0]]), np.array([[20.0]]),
    ...                    np.array([[5.0]]))
    >>> log_e(s, np.array([[0.191]])).round(4).tolist()
    [1.1933]
    """
    a = np.abs(lam)
    psi = np.expm1(a) - a
    return (lam * stats["S"] - a * stats["E"] - psi * (stats["V"] + stats["E"] + 4 * stats["E2"])
            ).sum(axis=-1)


def cusum(log_e_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CUSUM e-detector on log scale, log M_t = log e_t + max(log M_{t-1}, 0), and the day
    each excursion started (the j attaining max_j Σ_{s=j}^{t} log e_s).

    Examples
    --------
    >>> log_M, start = cusum(np.array([-1.0, 2.0, 1.0, -4.0, 0.5]))
    >>> log_M.tolist(), start.tolist()
    ([-1.0, 2.0, 3.0, -1.0, 0.5], [0, 1, 1, 1, 4])
    """
    x = np.asarray(log_e_values, dtype=float)
    log_M = np.empty_like(x)
    start = np.empty(x.shape, dtype=np.int64)
    prev = np.full(x.shape[:-1], -np.inf)
    since = np.zeros(x.shape[:-1], dtype=np.int64)
    for t in range(x.shape[-1]):
        restart = prev <= 0
        since = np.where(restart, t, since)
        prev = x[..., t] + np.maximum(prev, 0.0)
        log_M[..., t], start[..., t] = prev, since
    return log_M, start


def detector(W, swy, swp, swpp, *, tolerance=TOLERANCE, windows=WINDOWS, kappa: float = 0.5,
             cap: float = 1.0, alpha: float = 0.05, horizon: int = 365, share=None,
             share_error=None) -> dict:
    r"""The averaged CUSUM e-detector on per-day, per-bet-bin sums.

    Parameters
    ----------
    W, swy, swp, swpp : array_like, shape (..., days, bins)
        Per day and bet bin: Σw, Σwy, Σwp, Σwp² (leading axes: independent streams).
    tolerance : (float, float), default (0, 0.10)
        The null's (absolute, relative) tolerance: :math:`|E[y|p] - p| \le a + r p`.
    windows : sequence of int, default (3, 7, 28)
        Plug-in windows (days); one CUSUM detector per window, averaged.
    kappa, cap : float, default 0.5, 1.0
        Fraction of the Kelly bet, and the cap on :math:`|\lambda|`.
    alpha, horizon : float, int, default 0.05, 365
        P(any false alarm within ``horizon`` daily checks) <= alpha.
    share, share_error : array_like, optional
        The early stream's label share F_b at the lag and its error bound u_b (module notes).

    Returns
    -------
    dict
        ``log_e`` (..., windows, days), ``log_M_each`` (..., windows, days), ``log_M`` (..., days):
        log of the average of the windows' detectors, ``threshold``, ``alarm_day`` (...; the
        first day index with log_M >= threshold, -1 if none) and ``change_day`` (...; start of
        the excursion of the window detector largest at the alarm, -1 if none).

    Notes
    -----
    E-detectors: Shin, Ramdas & Rinaldo (2022), arXiv:2203.03532. The bet's bound: Bennett
    (1962); plug-in bets as in Waudby-Smith & Ramdas (2024), JRSS-B 86(1).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> n = np.full((60, 1), 1000.0)
    >>> q = np.where(np.arange(60) < 30, 0.2, 0.3)[:, None]   # true rate jumps on day 30
    >>> out = detector(n, rng.binomial(1000, q).astype(float), 0.2 * n, 0.04 * n)
    >>> int(out["alarm_day"]) in range(30, 40), int(out["change_day"]) in range(28, 33)
    (True, True)
    """
    stats = day_statistics(W, swy, swp, swpp, tolerance=tolerance, share=share,
                           share_error=share_error)
    each = np.stack([log_e(stats, bets(stats, m, kappa=kappa, cap=cap)) for m in windows],
                    axis=-2)
    log_M_each, start = cusum(each)
    log_M = _log_mean_exp(log_M_each, axis=-2)
    c = threshold(alpha, horizon)
    above = log_M >= c
    hit = above.any(axis=-1)
    alarm = np.where(hit, above.argmax(axis=-1), -1)
    at = np.maximum(alarm, 0)
    best = np.take_along_axis(log_M_each, at[..., None, None], axis=-1)[..., 0].argmax(axis=-1)
    change = np.take_along_axis(
        np.take_along_axis(start, at[..., None, None], axis=-1)[..., 0], best[..., None],
        axis=-1)[..., 0]
    return {"log_e": each, "log_M_each": log_M_each, "log_M": log_M, "threshold": c,
            "alarm_day": alarm, "change_day": np.where(hit, change, -1), "start": start}


def _log_mean_exp(x: np.ndarray, axis: int) -> np.ndarray:
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return (np.log(np.mean(np.exp(x - top), axis=axis, keepdims=True)) + top).squeeze(axis)
