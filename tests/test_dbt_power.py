"""The detection figures the dbt package documents (sqlcal.export.dbtgen.DETECTION, in its README and
macro properties) recomputed: the cutoff error's constant from its formula, and each test's
failure rate by simulating the statistic the test's SQL computes on fresh samples (numpy only,
fixed seeds) at the documented row counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sqlcal.export.dbtgen import DETECTION, render

SHIFT = DETECTION["shift"]
#: the cutoff error's lower bound at confidence 0.9: estimate − C/√n (δ = (1 − 0.9)/2)
C = 20 + math.sqrt(2 * math.log(1 / 0.05))
#: (mean, sd) of the scores' log-odds: skewed (mean score 0.28) and centred on 0.5
SCORES = {"skewed": (-1.2, 1.3), "centred": (0.0, 1.3)}


def _sample(rng, scores: str, n: int):
    mu, sd = SCORES[scores]
    logit = rng.normal(mu, sd, n)
    p = 1 / (1 + np.exp(-logit))
    y = rng.random(n) < 1 / (1 + np.exp(-(logit + SHIFT)))
    return p, y


def _rate(statistic, scores: str, n: int, reps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    return float(np.mean([statistic(*_sample(rng, scores, n)) for _ in range(reps)]))


def _cutoff_fails(p, y, maximum=0.0) -> bool:
    s = np.cumsum((y - p)[np.argsort(p, kind="stable")])
    estimate = (max(0.0, s.max()) - min(0.0, s.min())) / len(p)
    return estimate - C / math.sqrt(len(p)) > maximum


def _spiegelhalter_fails(p, y, maximum=2.0) -> bool:
    z = ((y - p) * (1 - 2 * p)).sum() / math.sqrt(((1 - 2 * p) ** 2 * p * (1 - p)).sum())
    return abs(z) > maximum


def _citl_fails(p, y, maximum=0.02) -> bool:
    return abs((y - p).mean()) > maximum


def _epsilon(scores: str) -> float:
    """The shift's cutoff error: the mean residual (one sign everywhere), by quadrature."""
    mu, sd = SCORES[scores]
    x, w = np.polynomial.hermite_e.hermegauss(80)
    logit = mu + sd * x
    return float(np.sum(w * (1 / (1 + np.exp(-logit - SHIFT)) - 1 / (1 + np.exp(-logit))))
                 / np.sqrt(2 * np.pi))


def test_the_cutoff_constants():
    assert round(C**2) == DETECTION["cutoff_even"] == 504
    assert round(DETECTION["cutoff_even"] / 0.08**2, -3) == DETECTION["cutoff_at_0.08"]
    eps = _epsilon("skewed")
    assert round(eps, 3) == 0.049
    assert DETECTION["cutoff_shift_skewed"] == round(DETECTION["cutoff_90"] / eps**2, -3)


def test_cutoff_error_fails_from_the_documented_rows_and_hardly_before():
    n = DETECTION["cutoff_shift_skewed"]
    assert 0.8 <= _rate(_cutoff_fails, "skewed", n, 60, seed=1) <= 1.0
    assert _rate(_cutoff_fails, "skewed", int(0.9 * DETECTION["cutoff_even"]
                                            / _epsilon("skewed") ** 2), 60, seed=2) == 0.0


@pytest.mark.parametrize("figure, statistic, scores, low, high", [
    ("spiegelhalter_skewed", _spiegelhalter_fails, "skewed", 0.85, 0.95),
    ("citl_skewed", _citl_fails, "skewed", 0.86, 0.94),
    ("citl_centred", _citl_fails, "centred", 0.86, 0.94),
])
def test_rows_for_90_percent_failures(figure, statistic, scores, low, high):
    assert low <= _rate(statistic, scores, DETECTION[figure], 1000, seed=3) <= high


def test_spiegelhalter_hardly_sees_a_shift_on_centred_scores():
    at = _rate(_spiegelhalter_fails, "centred", 30_000, 300, seed=4)
    assert abs(at - DETECTION["spiegelhalter_centred_at_30000"] / 100) < 0.07
    full = _rate(_spiegelhalter_fails, "centred", DETECTION["spiegelhalter_centred"], 60, seed=5)
    assert 0.8 <= full <= 1.0


def test_the_package_documents_them():
    readme, properties = render()["README.md"], render()["macros/sqlcal.yml"]
    assert "## What the tests can detect" in readme and "severity: warn" in readme
    assert "504/(ε − max)²" in readme and "217,000" in readme and "175,000" in readme
    assert "504/(e - max)^2" in properties and "severity" in properties
