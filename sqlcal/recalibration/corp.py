"""The CORP decomposition of a proper score (Dimitriadis, Gneiting and Jordan 2021): the mean
score of the predictions = miscalibration − discrimination + uncertainty, with the isotonic
(PAV) recalibration in the role of the ideal recalibrated forecast. One isotonic fit
(:func:`sqlcal.recalibration.fits.isotonic_blocks`) and the totals summary suffice;
:func:`corp_finish` is the arithmetic from those two frames."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from sqlcal.metrics import groups, key_tuple, result
from sqlcal.metrics._registry import Report, metric
from sqlcal.options import Option, checked
from sqlcal.query import declared, planner
from sqlcal.query.executor import as_source
from sqlcal.recalibration.fits import isotonic_blocks

SCORINGS = ("brier", "log_loss")


# the isotonic fit refines (its passes are chosen from the previous ones): exported as the
# levels, from which sqlcal.from_summaries finishes it exactly
@metric(needs=lambda src, o: [declared.totals()],
        refining={(None, None): "none: the isotonic fit reads the rows again, and the levels "
                                "finish it exactly"},
        report={"decompose": Report({"miscalibration": "corp_miscalibration",
                                     "discrimination": "corp_discrimination",
                                     "uncertainty": "corp_uncertainty"})},
        trust={"exact": "exact", "method": None, "scoring": None},
        options={"scoring": Option("choice", "the proper score decomposed", choices=SCORINGS)})
@checked
def decompose(
    data: Any,
    *,
    score: str | None = None,
    label: str | None = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    scoring: str = "brier",
    method: str = "auto",
    **source_options: Any,
) -> pd.DataFrame:
    r"""The CORP decomposition of a proper score: miscalibration − discrimination + uncertainty.

    Parameters
    ----------
    data : Source, ibis Table, path, URL or DataFrame
        What to measure; see :func:`sqlcal.source`.
    score : str, optional
        Column of predicted probabilities of the positive class (not needed when ``data`` is a
        :class:`~sqlcal.Source`).
    label : str, optional
        Column of 0/1 outcomes, or of soft labels in [0, 1] with ``soft_labels=True`` (not needed
        when ``data`` is a :class:`~sqlcal.Source`).
    weight : str, optional
        Column of non-negative row weights; by default every row weighs 1.
    by : str or sequence of str, default ()
        Group keys: one result row per group.
    where : ibis boolean expression, callable or SQL string, optional
        Filter applied in the engine before anything else.
    scoring : {"brier", "log_loss"}, default "brier"
        Squared error (y − p)², or the logarithmic score (natural log, 0·log 0 = 0).
    method : {"auto", "exact", "grid", "engine"}, default "auto"
        How the isotonic recalibration is computed (:func:`isotonic`); the result's ``exact``
        and ``method`` columns say whether it is exact and how it was computed.
    **source_options
        Further options of :func:`sqlcal.source`, such as ``table=``, ``on_invalid=`` and
        ``soft_labels=``.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``mean_loss`` (the mean proper score of the predictions),
        ``n``, ``W``,
        ``miscalibration`` = S(p) − S(p̂), ``discrimination`` = S(ȳ) − S(p̂), ``uncertainty`` =
        S(ȳ), where p̂ is the isotonic recalibration of p (:func:`isotonic`) and ȳ the group's
        observed rate, ``scoring`` (the ``scoring`` option), ``exact`` (whether the isotonic
        fit is exact; False on the score grid), ``method`` (the isotonic method used, ``"auto"``
        resolved); with ``on_invalid="drop"``, ``n_dropped``.

    See Also
    --------
    brier_decomposition : the binned Murphy decomposition.
    isotonic : the recalibration map behind the decomposition.
    brier : the Brier score alone.
    log_loss : the log score alone.

    Notes
    -----
    Dimitriadis, Gneiting and Jordan (2021), Stable reliability diagrams for probabilistic
    classifiers (PNAS): with the isotonic (PAV) recalibration :math:`\hat p` and the observed rate
    :math:`\bar y`, the decomposition is exact,

    .. math:: \bar S(p) = \underbrace{\bar S(p) - \bar S(\hat p)}_{\mathrm{MCB}}
       - \underbrace{(\bar S(\bar y) - \bar S(\hat p))}_{\mathrm{DSC}}
       + \underbrace{\bar S(\bar y)}_{\mathrm{UNC}},

    with :math:`\bar S(q) = \sum_i w_i S(q_i, y_i) / W`, and MCB, DSC ≥ 0. It equals
    model-diagnostics' ``decompose`` (Fissler, Lorentzen and Mayer 2022) with matched
    conventions. PAV is optimal for every proper score at once, so one fit serves both scorings.
    With soft labels the log score here is the cross-entropy −[y ln p + (1 − y) ln(1 − p)];
    model-diagnostics subtracts the label's own entropy (its Bregman form), which changes the
    score and UNC by that constant and leaves MCB and DSC as they are.
    Unlike the binned Murphy decomposition (:func:`sqlcal.brier_decomposition`), there is no bin
    count to choose.

    References
    ----------
    .. [1] T. Dimitriadis, T. Gneiting and A. I. Jordan, "Stable Reliability Diagrams for
       Probabilistic Classifiers", PNAS 118(8), 2021.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> df = pd.DataFrame({"p": [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9],
    ...                    "y": [0, 0, 1, 0, 1, 0, 1, 1]})
    >>> out = sqlcal.decompose(df, score="p", label="y")
    >>> out[["mean_loss", "miscalibration", "discrimination", "uncertainty", "exact"]].round(6)
       mean_loss  miscalibration  discrimination  uncertainty  exact
    0      0.175            0.05           0.125         0.25   True
    """
    src = as_source(data, score, label, weight=weight, by=by, where=where, **source_options)
    blocks, info = isotonic_blocks(src, method)
    totals = planner.fetch(src, declared.totals(*(["logloss"] if scoring == "log_loss" else [])))
    if scoring == "brier" and src.has_soft_labels:  # S(ȳ) and S(p̂) need Σwy²
        moments = planner.fetch(src, declared.totals("moments", "soft"))
        totals = totals.assign(swyy=moments["swyy"].to_numpy(float))
    values = corp_finish(totals, blocks, by=src.by, scoring=scoring)
    return result(src, values, ["mean_loss", "miscalibration", "discrimination", "uncertainty"],
                  {"scoring": scoring, "exact": bool(info["exact"]), "method": info["method"]})


def corp_finish(totals: pd.DataFrame, blocks: pd.DataFrame, *, by: Sequence[str] = (),
                scoring: str = "brier") -> pd.DataFrame:
    """The CORP decomposition of each group from its totals and its isotonic blocks.

    Parameters
    ----------
    totals : pandas.DataFrame
        The totals summary, one row per group: the keys, ``n``, ``W`` = Σw, ``swy`` = Σwy, and
        ``sw_sq_resid`` = Σw(y − p)² (Brier; ``swyy`` = Σwy² for soft labels) or
        ``sw_logloss`` and ``n_infinite_logloss`` (log loss).
    blocks : pandas.DataFrame
        The isotonic fit's blocks: the keys, ``W`` (the block's weight) and ``Y`` (its Σwy).
    by : sequence of str, default ()
        The group keys.
    scoring : {"brier", "log_loss"}, default "brier"
        The proper score.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``n``, ``W``, ``mean_loss``, ``miscalibration``,
        ``discrimination``, ``uncertainty``.

    Examples
    --------
    >>> totals = pd.DataFrame({"n": [4], "W": [4.0], "swy": [2.0], "sw_sq_resid": [0.9]})
    >>> blocks = pd.DataFrame({"W": [2.0, 2.0], "Y": [0.5, 1.5]})
    >>> corp_finish(totals, blocks)[["mean_loss", "miscalibration", "discrimination"]].round(6)
       mean_loss  miscalibration  discrimination
    0      0.225          0.0375          0.0625
    """
    by = list(by)
    fitted = {key_tuple(k): part for k, part in groups(blocks, by)}
    rows = []
    for key, t in groups(totals, by):
        W, Y = float(t["W"].sum()), float(t["swy"].sum())
        part = fitted.get(key_tuple(key))
        row = {**key, "n": int(t["n"].sum()), "W": W}
        if W <= 0 or part is None:
            rows.append(row | dict(score=np.nan, miscalibration=np.nan, discrimination=np.nan,
                                   uncertainty=np.nan))
            continue
        bW, bY = part["W"].to_numpy(float), part["Y"].to_numpy(float)
        if scoring == "brier":
            yy = float(t["swyy"].sum()) if "swyy" in t else Y
            s_p = float(t["sw_sq_resid"].sum()) / W
            s_iso = (yy - float(np.sum(bY * bY / bW))) / W
            s_clim = (yy - Y * Y / W) / W
        else:
            s_p = np.inf if int(t["n_infinite_logloss"].sum()) else float(
                t["sw_logloss"].sum()) / W
            s_iso = _log_score(bY, bW) / W
            s_clim = _log_score(np.array([Y]), np.array([W])) / W
        rows.append(row | dict(mean_loss=s_p, miscalibration=s_p - s_iso,
                               discrimination=s_clim - s_iso, uncertainty=s_clim))
    columns = ["mean_loss", "miscalibration", "discrimination", "uncertainty"]
    return pd.DataFrame(rows, columns=None if rows else [*by, "n", "W", *columns])


def _log_score(Y: np.ndarray, W: np.ndarray) -> float:
    """Σ over blocks of the log score of predicting Y/W to rows with label sum Y and weight W."""
    v = Y / W
    with np.errstate(divide="ignore", invalid="ignore"):
        pos = np.where(Y > 0, Y * np.log(v), 0.0)
        neg = np.where(W - Y > 0, (W - Y) * np.log1p(-v), 0.0)
    return float(-np.sum(pos + neg))
