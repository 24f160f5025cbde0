"""Temperature scaling of multiclass predictions, fitted in the warehouse (Guo, Pleiss, Sun &
Weinberger 2017, On Calibration of Modern Neural Networks).

The calibrated probabilities of an example are softmax(z / T), z its logits or its log
probabilities. With β = 1/T the weighted negative log-likelihood

    L(β) = Σᵢ wᵢ (log Σₖ exp(β zᵢₖ) − β zᵢ,yᵢ)

is convex in β: L'(β) = Σ w (E_q z − z_y) and L''(β) = Σ w Var_q z, q = softmax(β z). Each
Newton step is one aggregate query (a declared summary, ``temperature_terms``) returning L, L'
and L'' of every group at its current β, so the fit reads the rows once per step and never
fetches them. The steps are safeguarded: the root of L' is kept bracketed and a step leaving the
bracket is replaced by bisection (or doubling while no upper end is known).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from sqlcal.inputs.groupkeys import GroupKeys
from sqlcal.inputs.sources import InvalidInputError, Source
from sqlcal.metrics import key_tuple
from sqlcal.options import OptionError, checked
from sqlcal.query import declared, planner
from sqlcal.query.layouts import SUM_TOLERANCE, prepare
from sqlcal.recalibration.maps import TemperatureMap

#: Newton scans allowed per fit (every group steps in the same scans); a fit typically needs
#: 5 to 8 from T = 1
MAX_SCANS = 50
#: a group has converged when its Newton step changes β = 1/T by at most this, relatively
STEP_TOLERANCE = 1e-12
#: temperatures outside [1/BETA_MAX, 1/BETA_MIN] are refused as no fit
BETA_MAX, BETA_MIN = 1e8, 1e-8


@checked
def temperature_scaling(
    data: Any,
    *,
    format: str = "wide",
    label: str,
    probs: Sequence[str] | None = None,
    logits: Sequence[str] | None = None,
    example: str | None = None,
    cls: str | None = None,
    prob: str | None = None,
    logit: str | None = None,
    classes: Any = None,
    weight: str | None = None,
    by: str | Sequence[str] = (),
    where: Any = None,
    table: str | None = None,
    clip: float | None = None,
    sum_tolerance: float = SUM_TOLERANCE,
    max_scans: int = MAX_SCANS,
) -> TemperatureMap:
    """Fit the temperature T minimising the weighted negative log-likelihood of softmax(z / T),
    in the engine, one T per group.

    Parameters
    ----------
    data : ibis Table, path, URL or DataFrame
        The predictions, as :func:`sqlcal.multiclass` reads them.
    format : {"wide", "long"}, default "wide"
        Wide: one column per class (``probs`` or ``logits``) and the true class in ``label``.
        Long: one row per example and class (``example``, ``cls``, ``prob`` or ``logit``, and
        ``label`` 1 on the true class's row).
    label : str
        The true class (wide) or the 0/1 true-class indicator (long).
    probs, logits : sequence of str, optional
        Wide format: one probability (or logit) column per class; z = log p, or the logits.
    example, cls, prob, logit : str, optional
        Long format: the example id, the class, and the class's probability or logit.
    classes : sequence or mapping, optional
        Wide format: the label value of each column (see :func:`sqlcal.multiclass`).
    weight : str, optional
        Example weights (whole numbers count as repeated examples).
    by : str or sequence of str, default ()
        Group keys: one temperature per group.
    where : str, ibis boolean expression or callable, optional
        Only the rows meeting this condition (a SQL condition is parsed, never pasted).
    table : str, optional
        Table name inside a database given by path or URL.
    clip : float, optional
        Probabilities below ``clip`` are raised to it before the log (fit and map). Without it
        a probability of 0 is refused: its log is −∞ (a true class of probability 0 has an
        infinite loss; any other stays 0 under every temperature, and ``clip`` says how to
        treat it).
    sum_tolerance : float, default 1e-6
        The largest ``abs(sum of an example's probabilities - 1)`` accepted (``probs``/``prob``).
    max_scans : int, default 50
        The most Newton scans of the rows (each one aggregate query for every group).

    Returns
    -------
    TemperatureMap
        ``.temperature``, ``.table`` (keys, ``temperature``, ``n``, ``W``, ``nll_before``,
        ``nll_after`` as weighted means, ``scans``), ``.apply(ibis_table)`` and
        ``.sql(table, dialect=...)`` giving each class's calibrated probability.

    Raises
    ------
    InvalidInputError
        The table cannot be read as multiclass predictions (see :func:`sqlcal.multiclass`), a
        probability is 0 without ``clip``, or a group has no finite positive temperature (its
        true class always holds the top score, or the scores rank it no better than chance).
    OptionError
        An option that cannot be used (the message names it).

    See Also
    --------
    platt : the binary logistic map.
    multiclass : the binary rows to measure the predictions before and after.
    isotonic : a monotone map for binary scores.

    Notes
    -----
    Queries: one to check the table (a second only to name a problem), then one per Newton
    step, at most ``max_scans`` (a step's terms for every group at once). β = 1/T starts at 1;
    L(β) is convex, its derivative's root is kept bracketed in [lo, hi] and a Newton step
    leaving the bracket is replaced by bisection, or by doubling β while L' < 0 with no upper
    end known. A group stops when its step changes β by at most 1e-12 relatively. z is shifted
    by the example's largest z before exponentiating (no overflow), and exponents below −700
    are clipped (PostgreSQL's exp() refuses to underflow; e^−700 ≈ 1e−304).

    References
    ----------
    .. [1] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of Modern Neural
       Networks", ICML (PMLR 70), 2017.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> wide = pd.DataFrame({"a": [4.0, 0.0, 3.0, 1.0], "b": [0.0, 4.0, 0.0, 0.0],
    ...                      "y": ["a", "b", "b", "a"]})
    >>> m = sqlcal.temperature_scaling(wide, logits=["a", "b"], label="y")
    >>> round(m.temperature, 4)
    3.1358
    """
    if isinstance(max_scans, bool) or not isinstance(max_scans, int) or max_scans < 1:
        raise OptionError(f"max_scans must be a whole number >= 1, not {max_scans!r}")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float))
                             or not 0 < clip < 1):
        raise OptionError(f"clip must be a number in (0, 1), not {clip!r}")
    if clip is not None and (logits is not None or logit is not None):
        raise OptionError("clip= raises small probabilities before their log; logits have no "
                          "zeros to clip: leave clip= out with logits=/logit=")
    by = [by] if isinstance(by, str) else list(by)
    prepared = prepare(data, format=format, label=label, example=example, cls=cls, prob=prob,
                       probs=probs, logits=logits, logit=logit, classes=classes, weight=weight,
                       keys=by, table=table, where=where, sum_tolerance=sum_tolerance)
    t, layout = prepared.table, prepared.layout
    # the fit groups by the keys' internal columns (sqlcal.inputs.groupkeys): a key may be named
    # like a column of the fit's terms (g, h, n, W...), and NULL and NaN keys are two groups
    keys = GroupKeys.of(t.schema(), by)
    columns = list(keys.columns)
    t = t.mutate(**keys.select(t)) if by else t
    fit_layout = (layout[0], tuple(columns), *layout[2:])
    src = Source(rows=t, score="", label="", weight=None, by=(), on_invalid="raise",
                 allow_soft=True, float_label=False, validated=True,
                 origin="a multiclass table")

    def terms(betas: dict) -> pd.DataFrame:
        summary = declared.temperature_terms(fit_layout, prepared.logits, clip, betas.items())
        frame = planner.fetch(src, summary)
        index = [key_tuple(dict(zip(columns, row)))
                 for row in frame[columns].itertuples(index=False)] if by else [()] * len(frame)
        return frame.set_axis(pd.Index(index, tupleize_cols=False)).drop(columns=columns)

    first = terms({})  # no groups listed: every group at β = 1
    if not len(first):
        raise InvalidInputError("the table has no rows to fit (after where=)")
    _check_first(first, layout, prepared.logits, clip)
    state = {key: _Group(beta=1.0, before=float(row.nll) / float(row.W))
             for key, row in first.iterrows()}
    frame, scans = first, 1
    while True:
        for key, row in frame.iterrows():
            state[key].step(float(row.g), float(row.h), float(row.nll), float(row.W), scans)
        active = {key: g.beta for key, g in state.items() if not g.done}
        if not active:
            break
        if scans >= max_scans:
            raise InvalidInputError(
                f"temperature_scaling did not converge in max_scans={max_scans} scans for "
                f"{len(active)} group(s); pass a larger max_scans=")
        frame, scans = terms(active), scans + 1
    rows = []
    for key, g in state.items():
        if not BETA_MIN <= g.beta <= BETA_MAX:
            named = keys.values(dict(zip(columns, key)))
            raise InvalidInputError(f"group {named!r}: no finite positive temperature (β = 1/T "
                                    f"reached {g.beta:.3g})")
        rows.append({**dict(zip(columns, key)), "temperature": 1 / g.beta,
                     "n": int(first.n[key]), "W": float(first.W[key]), "nll_before": g.before,
                     "nll_after": g.after, "scans": g.scans})
    types = {c: str(dtype.copy(nullable=True)) for c, dtype in t.schema().items()
             if c in _read_columns(layout)}
    table = pd.DataFrame(rows)
    if by:  # groups in key order, whatever order the engine returned them in
        table = table.sort_values(columns, ignore_index=True)
    return TemperatureMap(by=keys.names, table=keys.present(table), layout=layout,
                          logits=prepared.logits, clip=clip, types=types, keys=keys)


class _Group:
    """One group's safeguarded Newton iteration on L'(β) = 0."""

    def __init__(self, beta: float, before: float):
        self.beta, self.before, self.after = beta, before, before
        self.lo, self.hi, self.done, self.scans = 0.0, math.inf, False, 0

    def step(self, g: float, h: float, nll: float, W: float, scans: int) -> None:
        self.after, self.scans = nll / W, scans
        if g > 0:
            self.hi = self.beta
        else:
            self.lo = self.beta
        newton = self.beta - g / h if h > 0 else math.nan
        if g == 0 or abs(newton - self.beta) <= STEP_TOLERANCE * self.beta:
            self.beta = newton if g != 0 else self.beta
            self.done = True
            return
        if self.lo < newton < self.hi:
            self.beta = newton
        elif math.isinf(self.hi):
            self.beta *= 2
        else:
            self.beta = (self.lo + self.hi) / 2
        if self.beta > BETA_MAX or self.hi - self.lo <= STEP_TOLERANCE * self.beta:
            self.done = True


def _check_first(first: pd.DataFrame, layout: tuple, logits: bool, clip) -> None:
    zeros = [c for c in first.columns if c.startswith("zeros")]
    if zeros and clip is None:
        counts = first[zeros].sum()
        names = layout[2] if layout[0] == "wide" else (layout[4],)
        found = [f"{int(n)} in column {c!r}" for c, n in zip(names, counts) if n]
        if found:
            raise InvalidInputError(
                "probabilities of 0 (" + ", ".join(found) + ") have no log: pass clip= (such "
                "as clip=1e-12) to raise them to it in the fit and the map, or give logits")
    for key, row in first.iterrows():
        where = f"group {key!r}: " if key != () else ""
        if not row.W > 0:
            raise InvalidInputError(f"{where}every example weighs 0: nothing to fit")
        if not row.gap > 0:
            raise InvalidInputError(
                f"{where}the true class holds the top score in every example: the likelihood "
                "grows without bound as T falls to 0 (no finite temperature)")
        if not row.g0 < 0:
            raise InvalidInputError(
                f"{where}the scores rank the true class no better than a uniform guess: the "
                "likelihood is largest at T = ∞ or at a negative temperature")


def _read_columns(layout: tuple) -> set:
    if layout[0] == "wide":
        return {*layout[1], *layout[2]}
    return {*layout[1], layout[2], layout[3], layout[4]}
