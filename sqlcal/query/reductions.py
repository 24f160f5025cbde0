"""Ibis expressions for the sufficient statistics (docs/design.md, "Reduce in the engine").

Every function here maps a table expression of normalised rows (group keys, ``p``, ``y``, ``w``) to
a small summary table expression; :func:`execute` brings a summary back as pandas. Nothing else in
the package builds queries, and nothing here computes a metric.

Summaries that scan all rows take ``checks``: a function of the scanned table giving extra cheap
aggregates (counts, minima, maxima) that validate the input in the same pass (see
``check_aggregates``), so validation costs no scan. Bin ids are computed without guards (a guard on
every row costs about one bare scan): a NULL score gets a NULL bin, a negative one a negative bin,
and NaN or infinite scores make the engine's integer cast fail, which the caller turns into the
validation report.
Unweighted sources skip every weight product: the finish reads W = n.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from typing import Callable, Sequence

import ibis
import ibis.expr.types as ir
import numpy as np
import pandas as pd
from ibis import _

from sqlcal.errors import engine_data_errors
from sqlcal.inputs import engines
from sqlcal.inputs.columns import (  # noqa: F401 (read as reductions.* too)
    BASELINE,
    RATE,
    ROW_COLUMNS,
    TRAINING_RATE,
    WEIGHT_MAX,
    fractional_part,
    number,
)
from sqlcal.inputs.grids import CONVENTIONS, LOGIT_CELL_BOUND, logit_edges, uniform_edges  # noqa: F401 (part of this module's API)
from sqlcal.query.declared import LOGLOSS_SQ, MERGED_BY_MAX, MERGED_BY_MIN, StoredSum, factors
from sqlcal.query.declared import store_sums as store_sums_of


def execute(expr: ir.Table) -> pd.DataFrame:
    """Run a summary query and return it as pandas (arrow transfer, no per-row Python); the
    engine's errors about the rows become :class:`sqlcal.errors.EngineDataError`."""
    with engine_data_errors():
        # one column at a time, each Arrow buffer released once converted: a large summary (a
        # slab of the levels) is not held twice, nor copied again into one 2-D float block
        return expr.to_pyarrow().to_pandas(split_blocks=True, self_destruct=True)


def statement(expr: ir.Table, dialect: str = "duckdb") -> str:
    """The SQL text of a summary query, as :func:`sqlcal.summary_sql` exports it."""
    return ibis.to_sql(expr, dialect=dialect).strip()


#: the table name a cached statement reads (see :func:`execute_planned`)
ROWS = "__sqlcal_rows__"
#: compiled statements of in-memory sources: plan key -> (SQL reading ROWS, result schema)
_PLANS: dict[tuple, tuple[str, object]] = {}
_PLANS_MAX = 512


def execute_planned(plan: tuple, build: Callable[[], ir.Table], con, name: str,
                    data, *, arrow: bool = False):
    """Run a summary query over an in-memory table through a cached compiled statement.

    ``plan`` identifies the statement: the source's shape (schema, columns, keys, filter text,
    options) and the summary's key, parts and whether it validates. On the first call ``build()``
    gives the Ibis query over the in-memory table ``name``; its SQL (:func:`statement`, what
    :func:`sqlcal.summary_sql` exports, with the table renamed) is kept, and later calls with
    the same plan build and compile nothing. ``data`` (an Arrow table, the rows of ``name``) is
    registered on the raw DuckDB connection ``con`` for the query only; the result is converted
    to the query's Ibis schema as :func:`execute` does, and returned as pandas, or with
    ``arrow=True`` as an Arrow table. A query reading any other in-memory table (a follow-up
    joined to a small frame) is run by :func:`execute` and not cached (its result is pandas).
    """
    import ibis.expr.operations as ops
    from ibis.backends.duckdb.converter import DuckDBPyArrowData

    cached = _PLANS.get(plan)
    if cached is None:
        expr = build()
        if [t.name for t in expr.op().find(ops.InMemoryTable)] != [name]:
            return execute(expr)
        cached = (statement(expr).replace(f'"{name}"', f'"{ROWS}"'), expr.schema(), [])
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[plan] = cached
    sql, schema, same = cached
    con.register(name, data)
    try:
        with engine_data_errors():
            table = con.execute(sql.replace(f'"{ROWS}"', f'"{name}"')).to_arrow_table()
    finally:
        con.unregister(name)
    # the engine's types (HUGEINT sums...) as the Ibis schema says. The first result of a plan
    # is converted by Ibis; when that was a plain cast of the columns (or nothing), later
    # results of the same types get the cast alone
    if same and table.schema == same[0]:
        if same[1] is not None:
            table = table.cast(same[1])
    else:
        converted = DuckDBPyArrowData.convert_table(table, schema)
        if not same:
            cast = None if converted.schema == table.schema else converted.schema
            if cast is None or _casts_to(table, cast, converted):
                same += [table.schema, cast]
        table = converted
    return table if arrow else table.to_pandas()


def _casts_to(table, schema, converted) -> bool:
    """Whether casting ``table`` to ``schema`` gives ``converted``."""
    try:
        return table.cast(schema).equals(converted)
    except Exception:  # a conversion no cast makes
        return False


def _aggregate(t: ir.Table, by: Sequence[str], **metrics) -> ir.Table:
    return t.group_by(list(by)).aggregate(**metrics) if by else t.aggregate(**metrics)


# -- validation -------------------------------------------------------------------------------


def check_aggregates(t: ir.Table, *, weighted: bool, float_label: bool,
                     rates: Sequence[str] = (), weights_checked: bool = False
                     ) -> dict[str, ir.Value]:
    """Cheap aggregates that prove the rows valid: NULLs by count, NaN and range by MIN/MAX (NaN
    sorts above every number in DuckDB, Postgres and Spark, so MAX is NaN when any value is), and
    non-binary labels by Σy(1−y) (0 exactly when every label in [0, 1] is 0 or 1). ``rates``:
    the rate columns read from the table (:data:`RATE`, :data:`TRAINING_RATE`), each counted
    and bounded the same way (``chk_<column>count``, ``..min``, ``..max``). ``weights_checked``:
    the weights were checked, and their kind learnt, by
    :func:`sqlcal.query.executor.learn_weight_kind`: the scan leaves out their checks."""
    # Scores are counted in every summary, whatever its key: a bin id need not be NULL for a
    # NULL score (LEAST(NULL, B - 1) is B - 1 in DuckDB), so a key cannot stand in for the count.
    checks = {
        "chk_p_count": t.p.count(),
        "chk_y_count": t.y.count(),
        "chk_y_min": t.y.min(),
        "chk_y_max": t.y.max(),
    }
    if float_label:
        checks["chk_y_soft"] = (t.y * (1 - t.y)).sum()
    if weighted and not weights_checked:
        checks |= {"chk_w_count": t.w.count(), "chk_w_min": t.w.min(), "chk_w_max": t.w.max(),
                   # 0 exactly when every weight is a whole number (a count of identical rows)
                   "chk_w_frac": fractional_part(t.w).sum()}
    for column in rates:
        checks |= {f"chk_{column}count": t[column].count(), f"chk_{column}min": t[column].min(),
                   f"chk_{column}max": t[column].max()}
    return checks


def validation(rows: ir.Table, by: Sequence[str], checks: dict[str, ir.BooleanValue],
               valid: ir.BooleanValue) -> ir.Table:
    """Per group: ``n_rows``, the number of rows failing each named check, and ``n`` valid rows.
    Run when the cheap checks fail (to name the counts) and for ``on_invalid="drop"``."""
    metrics = {"n_rows": rows.count()}
    metrics |= {name: rows.count(where=cond) for name, cond in checks.items()}
    metrics["n"] = rows.count(where=valid)
    return _aggregate(rows, by, **metrics)


# -- the variance weight ---------------------------------------------------------------------


def variance_weights(t: ir.Table) -> tuple[ir.FloatingValue, ir.FloatingValue, bool]:
    r"""The variance weight v of a row, its label-free part :math:`v_0`, and whether the rows
    carry a sampling design (``v`` and ``v0`` differ).

    A row weight is :math:`w = f/\pi`: a frequency part f (whole-number weights count identical
    rows) times the inverse of the probability π that the sampling kept the row. A weighted
    sum :math:`\hat T = \sum_\text{kept} w z` estimates the total of z over the rows before the
    sampling, drawn i.i.d. from their population; under Poisson (independent Bernoulli) sampling
    its variance, the population's and the sampling's together, is estimated without bias by
    :math:`\sum_\text{kept} v z^2` with :math:`v = f/\pi^2` (Särndal, Swensson & Wretman (1992),
    Model Assisted Survey Sampling, ch. 2-3 and 5). The part a null model can replace by its
    expectation is the population's, :math:`\sum_\text{kept} v_0 E_0[z^2]` with
    :math:`v_0 = f/\pi` (each kept row stands for f/π rows of the population); the design adds
    :math:`\sum_\text{kept} (v - v_0) z^2` (:func:`null_variance`).

    - Negative downsampling (column :data:`RATE`): π = r on a kept negative, 1 on a positive,
      f the weight column (or 1): :math:`v = w/r`, :math:`v_0 = w`.
    - Sampling weights (no rate): π unknown, f = 1, weights of any scale:
      :math:`v = v_0 = w^2` (the null model assumes the weights do not depend on the label
      given the score; a design that does is a sampling rate).
    - Frequency weights have v = w and need no sums of their own: the summaries' Σw-sums are
      theirs (the metrics read them for ``weight_kind="frequency"``).
    """
    if RATE in t.columns:
        return t.w * (1.0 / t[RATE]), t.w, True
    ww = square(t.w)
    return ww, ww, False


def square(x: ir.FloatingValue) -> ir.FloatingValue:
    """x², taken as 0 for x below :data:`TINY` (x ≥ 0): the one rule of a square whose operand
    may be tiny, in the scans and the summary store alike, so a stored window's sums are a
    scan's: a weight's (the sampling weights' variance weight w², :func:`variance_weights`, and
    every stored w²-sum, :func:`store_sums`) and the Brier score's interval's fourth powers
    ((y − p)⁴ as the square of (y − p)², a score's p⁴ as the square of p²)."""
    # x² below 2^-1022 is subnormal or 0: taken as 0 on every engine (PostgreSQL raises
    # "underflow" where a product of non-zero numbers rounds to 0; the loss is < 2^-1022)
    return ibis.ifelse(x < TINY, 0.0, x * x)


#: the least number whose square is a normal double (2^-511)
TINY = 2.0 ** -511

#: the dialects whose products give a subnormal or 0 where they underflow, as IEEE arithmetic
#: does (PostgreSQL raises "value out of range: underflow"; an engine not named here is taken
#: to raise)
QUIET_UNDERFLOW = frozenset({"duckdb", "spark", "databricks"})

_DIALECT: ContextVar[str | None] = ContextVar("sqlcal_query_dialect", default=None)


@contextmanager
def building_for(dialect: str):
    """Queries built inside are for ``dialect`` (the executor's scope around a build): where
    its products underflow quietly (:data:`QUIET_UNDERFLOW`) the Brier score's interval takes
    (y − p)⁴ as the product it is, without :func:`square`'s test on every row."""
    token = _DIALECT.set(dialect)
    try:
        yield
    finally:
        _DIALECT.reset(token)


def fourth_power(r2: ir.FloatingValue) -> ir.FloatingValue:
    """(r²)² of a squared residual: the plain product on an engine known to underflow quietly
    (its subnormal or 0), else :func:`square` (0 below 2^-1022): the two differ by less than
    2^-1022 a row. The test costs DuckDB about 0.8 CPU s on 10⁸ rows (a bare scan), and only
    PostgreSQL needs it (a score below about 1.8e-81 has a p⁴ that underflows)."""
    return r2 * r2 if _DIALECT.get() in QUIET_UNDERFLOW else square(r2)


def null_variance(t: ir.Table, expected: ir.FloatingValue, square: ir.FloatingValue
                  ) -> ir.FloatingValue:
    """A row's term of the variance of a weighted sum of z under a null model: :math:`v_0`
    times ``expected`` (:math:`E_0[z^2]` given the score) plus the design's :math:`(v - v_0)`
    times ``square`` (the row's own :math:`z^2`); see :func:`variance_weights`."""
    v, v0, design = variance_weights(t)
    if not design:
        return v * expected
    return v0 * expected + (v - v0) * square


def row_columns(rows: ir.Table) -> list[str]:
    """The normalised columns of ``rows`` a summary reads (:data:`ROW_COLUMNS` present)."""
    return [c for c in ROW_COLUMNS if c in rows.columns]


# -- sums shared by every summary -------------------------------------------------------------


def _sums(t: ir.Table, parts: frozenset, *, weighted: bool) -> dict:
    """The sums a summary row carries, by ``parts`` (each metric asks only for what it reads):

    always ``n``, ``p_max`` and (weighted) ``W`` = Σw; ``"sums"``: Σwy, Σwp, ``p_min``;
    ``"sw2"``: Σv, the sum of the variance weight (:func:`variance_weights`: Σw² for sampling
    weights), and with a sampling design ``sw2_0`` = Σv₀ and ``sw2_design`` = Σ(v − v₀)(y − p)²;
    ``"ny"``: Σy, the rows with y = 1 of binary labels; ``"moments"``: Σwp², Σwyp (and Σwy²
    with ``"soft"``); ``"pp"``: Σwp²; ``"sw2y"``: Σvy; ``"sw2p"``: the calibration ratio's
    null variance terms ``sw2p`` = Σv₀p and ``sw2pp`` = Σ(2v₀ − v)p² (Σw²p and Σw²p² without
    a design: every row whose v₀ differs from v is a negative); ``"residuals"``: ``total`` =
    Σw(y−p), ``positive`` = Σw(y−p)⁺ (the negative part is positive − total) and the Bernoulli
    variance ``var`` = Σwp(1−p) (with ``"sw2"``, ``var2``: its null variance under the variance
    weight, Σv₀p(1−p) + Σ(v − v₀)(y − p)², Σw²p(1−p) without a design).
    ``"spread"`` (weighted): the variance weight's second moments of (1, y, p), ``sw2`` = Σv,
    ``sw2y`` = Σvy, ``sv_p`` = Σvp, ``sv_yy`` = Σvy², ``sv_yp`` = Σvyp, ``sv_pp`` = Σvp²: the
    covariance of a Poisson bootstrap of the sums (Σw, Σwy, Σwp) (:mod:`sqlcal.metrics.intervals`);
    ``"r4"``: ``sw_r4`` = Σw(y − p)⁴ (and ``sv_r4`` = Σv(y − p)⁴ with ``"spread"``).
    Unweighted, the weight products are left out: the finish reads W = Σw² = n.
    """
    w = t.w if weighted else None
    times = (lambda v: w * v) if weighted else (lambda v: v)
    sums = {"n": t.count(), "p_max": t.p.max()}
    if weighted:
        sums["W"] = w.sum()
    if "sums" in parts:
        sums |= {"swy": times(t.y).sum(), "swp": times(t.p).sum(), "p_min": t.p.min()}
    if not weighted:
        v = v0 = design = None
    else:
        v, v0, design = variance_weights(t)
    if "sw2" in parts and weighted:
        sums["sw2"] = v.sum()
        if design:
            r = t.y - t.p
            sums |= {"sw2_0": v0.sum(), "sw2_design": ((v - v0) * r * r).sum()}
    if "ny" in parts and weighted:  # rows with y = 1 (unweighted, Σwy counts them)
        sums["ny"] = t.y.sum()
    if "sw2y" in parts and weighted:  # Σvy: sandwich and linearized variances
        sums["sw2y"] = (v * t.y).sum()
    if "sw2p" in parts and weighted:  # the calibration ratio's null variance
        sums |= {"sw2p": (v0 * t.p).sum(),
                 "sw2pp": ((2 * v0 - v) * (t.p * t.p) if design else v * t.p * t.p).sum()}
    if "pp" in parts and "moments" not in parts:  # Σwp² alone (the calibration ratio's)
        sums["swpp"] = times(t.p * t.p).sum()
    if "moments" in parts:
        sums |= {"swpp": times(t.p * t.p).sum(), "swyp": times(t.y * t.p).sum()}
        if "soft" in parts:
            sums["swyy"] = times(t.y * t.y).sum()
    if "spread" in parts and weighted:  # the variance weight's second moments of (1, y, p)
        sums |= {"sw2": v.sum(), "sw2y": (v * t.y).sum(), "sv_p": (v * t.p).sum(),
                 "sv_yy": (v * t.y * t.y).sum(), "sv_yp": (v * t.y * t.p).sum(),
                 "sv_pp": (v * t.p * t.p).sum()}
    if "r4" in parts:  # Σw(y − p)⁴: the Brier score's delta-method variance
        r4 = fourth_power((t.y - t.p) * (t.y - t.p))  # a score below ~1e-81: p⁴ underflows
        sums["sw_r4"] = times(r4).sum()
        if "spread" in parts and weighted:
            sums["sv_r4"] = (v * r4).sum()
    if "residuals" in parts:
        r = times(t.y - t.p)
        pq = t.p * (1 - t.p)
        sums |= {"total": r.sum(), "positive": ibis.greatest(r, 0.0).sum(), "var": times(pq).sum()}
        if "sw2" in parts and weighted:
            r = t.y - t.p
            sums["var2"] = null_variance(t, pq, r * r).sum()
    return sums


def fill_unweighted(frame: pd.DataFrame) -> pd.DataFrame:
    """Add the columns a summary leaves out: unweighted W = Σw² = n and Σw²p(1−p) = Σwp(1−p);
    binary labels Σwy² = Σwy; the negative residual part Σw(p−y)⁺ = positive − total."""
    frame = frame.copy(deep=False)  # copy-on-write: the new columns never touch the caller's
    if "W" not in frame and "n" in frame:
        frame["W"] = frame["n"].astype(float)
        frame["sw2"] = frame["W"]
        if "var" in frame:
            frame["var2"] = frame["var"]
    if "swpp" in frame and "swyy" not in frame:
        frame["swyy"] = frame["swy"]
    if "positive" in frame:
        frame["negative"] = frame["positive"] - frame["total"]
    return frame


# -- totals -----------------------------------------------------------------------------------


def totals(rows: ir.Table, by: Sequence[str], parts: frozenset, *, weighted: bool,
           checks: Callable | None = None, soft: bool = True) -> ir.Table:
    """One row per group: the totals summary.

    Columns: ``n``, ``W``, ``swy``, ``swp``, ``p_min``, ``p_max``, ``sw_sq_resid`` = Σw(y−p)²;
    with part ``"spiegelhalter"`` ``sw_spieg`` = Σw(y−p)(1−2p), ``sw_spieg_var`` =
    Σw(1−2p)²p(1−p) and ``sw2_spieg_var`` (with w²); ``sw_logloss`` = Σw·(−y ln p − (1−y)ln(1−p))
    over finite terms and ``n_infinite_logloss`` (with part ``"logloss"``: a log per row costs
    about a bare scan, so only the log loss asks for it). ``soft=False`` (labels known to be 0 or
    1, or refused by the validation this scan carries) takes one logarithm per row instead of two.
    """
    rows = with_given(rows, "logloss" in parts, soft)
    return grouped(rows, by, totals_sums(rows, parts, weighted=weighted, soft=soft),
                   checks(rows) if checks else {}, weighted=weighted, soft=soft)


#: the projected columns holding the probability given to the outcome and its log loss term
#: (binary labels)
GIVEN, LOSS = "given", "loss"


def given_probability(t: ir.Table) -> ir.FloatingValue:
    """p for a positive outcome, 1 − p for a negative one (labels in {0, 1})."""
    return ibis.ifelse(t.y > 0, t.p, 1 - t.p)


def log_loss_term(given: ir.FloatingValue) -> ir.FloatingValue:
    """−ln of the probability given to the outcome; 0 where it is 0 (those infinite terms are
    counted apart, and Postgres raises on ln(0))."""
    return -ibis.ifelse(given > 0, given, 1.0).ln()


def with_given(t: ir.Table, logloss: bool, soft: bool) -> ir.Table:
    """``t`` with the :data:`GIVEN` and :data:`LOSS` columns when the scan takes the log loss
    (``logloss``) of binary labels (not ``soft``): projected once a row and read by every
    log-loss aggregate (written inline, the engine evaluates the logarithm once per aggregate:
    four times a row for the normalized entropy's sums)."""
    if soft or not logloss:
        return t
    given = given_probability(t)
    return t.mutate(**{GIVEN: given, LOSS: log_loss_term(given)})


def totals_sums(t: ir.Table, parts: frozenset, *, weighted: bool, soft: bool = True) -> dict:
    """The aggregates of :func:`totals` (without validation), to fuse into other summaries."""
    p, y = t.p, t.y
    w = t.w if weighted else ibis.literal(1.0)
    times = (lambda v: w * v) if weighted else (lambda v: v)
    r = y - p
    sums = _sums(t, parts | {"sums"}, weighted=weighted) | dict(sw_sq_resid=times(r * r).sum())
    if "spiegelhalter" in parts:
        q = 1 - 2 * p
        spieg_var = q * q * p * (1 - p)  # products, not POWER: a fifth of the query's cost
        sums |= dict(sw_spieg=times(r * q).sum(), sw_spieg_var=times(spieg_var).sum())
        if weighted and "sw2" in parts:  # under the variance weight (the design's own part by
            # the rows' z²); frequency weights read the Σw-sum (variance_parts asks for neither)
            sums["sw2_spieg_var"] = null_variance(t, spieg_var, r * r * q * q).sum()
    if "logloss" in parts:
        # 0·log 0 = 0: a log is taken only of a positive argument (Postgres raises on ln(0)); a
        # positive-weight row with y > 0 at p = 0 (or y < 1 at p = 1) has infinite loss and is
        # counted instead
        infinite = (w > 0) & (((p == 0) & (y > 0)) | ((p == 1) & (y < 1)))
        if soft:
            log_p = ibis.ifelse(p > 0, p, 1.0).ln()
            log_q = ibis.ifelse(p < 1, 1 - p, 1.0).ln()
            loss = -(ibis.ifelse(y > 0, y * log_p, 0.0) + ibis.ifelse(y < 1, (1 - y) * log_q, 0.0))
        else:  # y in {0, 1}: the loss is −ln of the probability given to the outcome
            # (a column of the scan's projection when the caller made one: written inline, the
            # engine evaluates its CASE three times a row; this way the log-loss sums cost a
            # tenth less of the default report's first scan on DuckDB)
            given = t[GIVEN] if GIVEN in t.columns else given_probability(t)
            loss = t[LOSS] if LOSS in t.columns else log_loss_term(given)
            # (every row has positive weight: a source leaves out its rows of weight 0, and a
            # negative weight fails validation; a test of w here cost the weighted scan a tenth)
            infinite = given == 0
        sums |= dict(sw_logloss=times(loss).sum(), n_infinite_logloss=t.count(where=infinite))
        if parts & LOGLOSS_SQ:  # Σwℓ²: the log loss's delta-method variance; with Σwyℓ
            sums |= dict(sw_logloss_sq=times(loss * loss).sum())  # (logloss_var) the NE's
            if "logloss_var" in parts:
                sums |= dict(swy_logloss=times(y * loss).sum())
            if "sw2" in parts and weighted:  # the same under the variance weight, with Σvℓ
                v = variance_weights(t)[0]
                sums |= dict(sw2_logloss=(v * loss).sum(), sw2_logloss_sq=(v * loss * loss).sum())
                if "logloss_var" in parts:
                    sums |= dict(sw2y_logloss=(v * y * loss).sum())
    return sums


# -- equal-width bins -------------------------------------------------------------------------


def uniform_bin(p: ir.FloatingValue, bins: int, convention: str) -> ir.IntegerValue:
    """The equal-width bin id of a score under a named convention.

    - ``sqlcal``: ``LEAST(FLOOR(p·B), B−1)``, left-closed, p = 1 in the last bin.
    - ``sklearn``: right-closed on numpy ``linspace`` edges, 0 in the first bin, 1 in the last
      (scikit-learn ``calibration_curve``; uncertainty-calibration's equal-width edges are
      ``i/B`` instead, which is this module's ``sqlcal`` edges with right-closed bins).
    - ``netcal``: left-closed on ``linspace`` edges, the last bin closed (netcal, the TCE
      reference, MCGrad). ``linspace`` puts 0.3, 0.6 and 0.7 just above the decimals, so these
      scores fall in the lower bin; the edges go in as the literals numpy computes.
    - ``relplot``: ``FLOOR(p / (1/B))`` as relplot's ``binnedECE``; p = 1 gets bin B of its own.
    """
    if convention == "sqlcal":
        return ibis.least((p * bins).floor().cast("int64"), bins - 1)
    if convention == "relplot":
        return (p / number(1.0 / bins)).floor().cast("int64")
    if convention in ("sklearn", "netcal"):
        edges = uniform_edges(bins, convention)[1:-1]
        below = (lambda e: p <= e) if convention == "sklearn" else (lambda e: p < e)
        if not len(edges):
            return ibis.literal(0, type="int64")
        # A flat CASE (not a sum of comparisons) keeps the expression shallow for large B.
        return ibis.cases(*[(below(number(e)), k) for k, e in enumerate(edges)],
                          else_=len(edges)).cast("int64")
    raise ValueError(f"convention must be one of {CONVENTIONS}, not {convention!r}")


def uniform_bins(rows: ir.Table, by: Sequence[str], bins: int, convention: str,
                 parts: frozenset, *, weighted: bool, checks: Callable | None = None) -> ir.Table:
    """The bins summary for equal-width bins: one row per group and non-empty bin, with the sums
    of :func:`_sums`."""
    t = rows.mutate(bin=uniform_bin(rows.p, bins, convention))
    sums = _sums(t, parts, weighted=weighted)
    return t.group_by([*by, "bin"]).aggregate(**sums, **(checks(t) if checks else {}))


# -- score cells: the fine grid behind equal-mass bins and the cumulative metrics -------------


def score_cell(p: ir.FloatingValue, cells: int) -> ir.IntegerValue:
    """The grid cell of a score, ``LEAST(FLOOR(p·2^k), 2^k − 1)``: exact for a power of two, and
    equal scores always share a cell, so cells are contiguous score ranges that never split ties."""
    return ibis.least((p * cells).floor().cast("int64"), cells - 1)


def cells(rows: ir.Table, by: Sequence[str], cells: int, parts: frozenset, *, weighted: bool,
          checks: Callable | None = None, soft: bool = True) -> ir.Table:
    """One row per group and non-empty score cell with the sums of :func:`_sums`: at most
    ``cells`` rows per group, one GROUP BY (a zoom into a few cells runs it on
    :func:`within_ranges`)."""
    t = rows.mutate(cell=score_cell(rows.p, cells))
    return grouped(t, [*by, "cell"], _sums(t, parts, weighted=weighted),
                   checks(t) if checks else {}, weighted=weighted, soft=soft)


def logit_cell(p: ir.FloatingValue, scale: int) -> ir.IntegerValue:
    """The log-odds cell of a score, ``FLOOR(ln(p/(1 − p))·scale)`` clipped to
    ±:data:`sqlcal.inputs.grids.LOGIT_CELL_BOUND`·scale (p <= 0 first, p >= 1 last; no logarithm is
    taken of either): non-decreasing in p, so a cell is a contiguous score range, exactly
    [p_min, p_max] of its rows whatever the engine's rounding of the logarithm."""
    lo, hi = -LOGIT_CELL_BOUND * scale, LOGIT_CELL_BOUND * scale - 1
    q = ibis.ifelse((p > 0) & (p < 1), p, 0.5)
    z = ((q / (1 - q)).ln() * scale).floor().cast("int64")
    return ibis.ifelse(p <= 0, lo, ibis.ifelse(p >= 1, hi, ibis.greatest(ibis.least(z, hi), lo)))


def logit_cells_within(rows: ir.Table, by: Sequence[str], scale: int, cells: int, ranges: tuple,
                       parts: frozenset, *, weighted: bool, soft: bool = True) -> ir.Table:
    """The rows inside ``ranges`` (cells of the 2^k grid ``cells``) per group and log-odds cell
    ``lcell`` (:func:`logit_cell`), with the sums of :func:`_sums`: the equal-mass search's
    split of the cells where low scores crowd."""
    t = within_ranges(rows, by, ranges)
    t = t.mutate(lcell=logit_cell(t.p, scale))
    return grouped(t, [*by, "lcell"], _sums(t, parts, weighted=weighted), {},
                   weighted=weighted, soft=soft)


def _running(t: ir.Table, by: Sequence[str], r: ir.NumericValue) -> ir.NumericValue:
    """The running sum of r from its cell's start: a window partitioned by (group, cell) and
    ordered by score with a RANGE frame, so tied rows are peers and share one running sum (ties
    are one unit), and no window spans a group."""
    within = ibis.range_window(preceding=None, following=0, group_by=[*by, "cell"], order_by=t.p)
    return r.sum().over(within)


def in_range(p: ir.FloatingValue, lo: float, hi: float) -> ir.BooleanValue:
    """lo <= p < hi, or lo <= p <= 1 when hi = 1 (the last cell of a 2^k grid holds p = 1)."""
    return (p >= number(lo)) & ((p <= number(hi)) if hi == 1.0 else (p < number(hi)))


def within_ranges(rows: ir.Table, by: Sequence[str], ranges: tuple) -> ir.Table:
    """The rows inside the union of every group's score ranges ``((group key values, lo, hi),
    ...)``: ranges of a 2^k grid (every follow-up's) as one IN list of cell ids, others as score
    comparisons. Rows of one group inside another group's ranges pass too, so a summary over
    them holds a few extra keys, which the planner drops in pandas
    (:func:`sqlcal.query.planner.fetch`): a condition per group costs DuckDB several times the
    whole follow-up, on rows or on the grouped result."""
    if not ranges:
        return rows.filter(ibis.literal(False))
    return rows.filter(_in_ranges(rows.p, [(lo, hi) for _, lo, hi in ranges]))


def _in_ranges(p: ir.FloatingValue, spans: list) -> ir.BooleanValue:
    """p inside any of ``spans`` (lo, hi): score comparisons when the merged spans are a few,
    else one IN list of the cell ids of the finest 2^k grid they end on. Measured on DuckDB
    over 10^7 rows (CPU s): 2 spans 0.19 compared; 14 spans 1.1 compared, 0.17 as 21 cell ids;
    333 cell ids 0.28 in one list, 1.9 spread over the lists of four grids."""
    merged: list[list[float]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    k = max(max(_grid_exponent(lo), _grid_exponent(hi)) for lo, hi in merged)
    ids = sum(int(hi * 2**k) - int(lo * 2**k) for lo, hi in merged) if k <= 52 else None
    if len(merged) <= 4 or ids is None or ids > 1 << 14:
        return ibis.or_(*(in_range(p, lo, hi) for lo, hi in merged))
    cells = [c for lo, hi in merged for c in range(int(lo * 2**k), int(hi * 2**k))]
    return score_cell(p, 2**k).isin(cells)


def _grid_exponent(x: float) -> int:
    """The least k with x·2^k a whole number (x a double in [0, 1])."""
    return Fraction(x).denominator.bit_length() - 1


def running_extremes(rows: ir.Table, by: Sequence[str], cells: int, *,
                     weighted: bool) -> ir.Table:
    """Per group and cell of the 2^k grid (``cells``): the max and min of the running residual
    sum Σw(y − p) from the cell's start (``s_max``, ``s_min``) and a score reaching each, ties
    one unit (see :func:`_running`); run on the rows of a few cells (:func:`within_ranges`)."""
    t = rows.mutate(cell=score_cell(rows.p, cells))
    t = t.mutate(S=_running(t, by, t.w * (t.y - t.p) if weighted else t.y - t.p))
    return t.group_by([*by, "cell"]).aggregate(
        s_max=t.S.max(), s_min=t.S.min(), p_at_max=t.p.argmax(t.S), p_at_min=t.p.argmin(t.S)
    )


def _joined_to_cells(rows: ir.Table, by: Sequence[str], cells: int,
                     frame: pd.DataFrame) -> ir.Table:
    """The rows of the (group, cell) pairs listed in ``frame`` (keys, ``cell``, other columns
    suffixed ``_``): a join against it as a small table, not an IN list, whose thousands of
    literals would cost Ibis seconds to compile."""
    t = rows.mutate(cell=score_cell(rows.p, cells))
    small = frame.rename(columns={c: f"{c}_" for c in frame.columns if c not in by})
    m = ibis.memtable(small)
    on = [t.cell == m.cell_, *(t[k].identical_to(m[k]) for k in by)]
    extra = [c for c in small.columns if c not in (*by, "cell_")]
    return t.join(m, on).select(*by, "cell", *row_columns(rows), *extra)


def cell_prefix_min(rows: ir.Table, by: Sequence[str], cells: int, centres: pd.DataFrame, *,
                    weighted: bool) -> ir.Table:
    """Per group and wanted cell, the lowest running sum of w(y − v) from the cell's start (a
    RANGE window, ties one unit), with v the cell's own centre: ``centres`` has the keys,
    ``cell`` and ``v`` (joined, keys compared NULL-safely)."""
    t = _joined_to_cells(rows, by, cells, centres[[*by, "cell", "v"]])
    t = t.mutate(S=_running(t, by, t.w * (t.y - t.v_) if weighted else t.y - t.v_))
    return t.group_by([*by, "cell"]).aggregate(s_min=t.S.min())


# -- logit grid: the linear-binned histogram behind LS-ECE ------------------------------------


def logit_grid(rows: ir.Table, by: Sequence[str], delta: float, clip: float, *,
               weighted: bool, checks: Callable | None = None,
               parts: frozenset = frozenset(), stored: Sequence[StoredSum] = ()) -> ir.Table:
    """Per group and logit-grid node k: the linear-binned masses of every row and of its label.

    z = logit(p) with p clipped to [clip, 1 − clip]; x = z/δ, k = FLOOR(x), f = x − k. Each row puts
    weight w(1−f) on node k and w·f on node k+1 (linear, "cloud-in-cell" binning keeps each row's
    mass and mean). Its second-order error, ½δ²f(1−f)K'' per row, is cancelled in numpy from the
    variance masses, split the same way. Columns: ``m_lo`` = Σw(1−f), ``m_hi`` = Σwf, ``y_lo`` =
    Σwy(1−f), ``y_hi`` = Σwyf, ``v_lo`` = Σwf(1−f)², ``v_hi`` = Σwf²(1−f), ``vy_lo``, ``vy_hi``
    (the same times y), ``n``, ``W`` (weighted), ``p_min``, ``p_max``, and the interval's second
    moments for ``parts`` (:func:`logit_grid_moments`). The grid is anchored at 0 for every
    group, so no pass for the range is needed. ``stored``: the summary store's sums of its logit
    table (:data:`sqlcal.query.declared.STORE_SUMS`, factors ``lo`` = 1 − f and ``hi`` = f),
    rendered by :func:`store_sums` (the snapshot's scan).
    """
    pc = ibis.greatest(ibis.least(rows.p, 1 - clip), clip)
    x = (pc.ln() - (1 - pc).ln()) / delta
    t = rows.mutate(x=x).mutate(k=_.x.floor().cast("int64"))
    t = t.mutate(f=t.x - t.k)
    if stored:  # the stored sums' factors, by name
        t = t.mutate(lo=1 - t.f, hi=t.f, **store_terms(t, stored))
    times = (lambda v: t.w * v) if weighted else (lambda v: v)
    g, h = 1 - t.f, t.f
    sums = _sums(t, frozenset(), weighted=weighted) | {"p_min": t.p.min()}
    for name, mass in (("m", times(1.0)), ("y", times(t.y)), ("v", times(g * h)),
                       ("vy", times(t.y * g * h))):
        sums |= {f"{name}_lo": (mass * g).sum(), f"{name}_hi": (mass * h).sum()}
    sums |= logit_grid_moments(t, g, h, parts, weighted=weighted)
    sums |= store_sums(t, stored)
    return t.group_by([*by, "k"]).aggregate(**sums, **(checks(t) if checks else {}))


def logit_grid_moments(t: ir.Table, g: ir.FloatingValue, h: ir.FloatingValue, parts: frozenset,
                       *, weighted: bool) -> dict:
    """LS-ECE's interval sums per logit cell (``parts`` with ``"moments"``): a row gives shares
    g = 1 − f and h = f of its weight to the nodes k and k + 1, so under a Poisson bootstrap of
    the rows the node masses (M_k, M_k+1, Y_k, Y_k+1) of one cell vary with covariance
    Σv·(1, y)⊗(g, h) (1, y)⊗(g, h)ᵀ: ``q_ll`` = Σvg², ``q_lh`` = Σvgh, ``q_hh`` = Σvh², the
    same times y (``qy_*``) and, with ``"soft"``, y² (``qyy_*``). v = w (frequency weights,
    columns ``q*``), and with ``"spread"`` also the variance weight (columns ``qv*``)."""
    if "moments" not in parts:
        return {}
    weights = [("q", t.w if weighted else None)]
    if "spread" in parts and weighted:  # the weights' kind may be learnt after the scan
        weights.append(("qv", variance_weights(t)[0]))
    out = {}
    labels = (("", None), ("y", t.y)) + ((("yy", t.y * t.y),) if "soft" in parts else ())
    for prefix, v in weights:
        for name, y in labels:
            for ab, share in (("ll", g * g), ("lh", g * h), ("hh", h * h)):
                z = share if y is None else y * share
                out[f"{prefix}{name}_{ab}"] = (z if v is None else v * z).sum()
    return out


def levels(rows: ir.Table, by: Sequence[str], parts: frozenset, *, weighted: bool,
           checks: Callable | None = None) -> ir.Table:
    """The levels summary: one row per group and distinct score ``p`` with the sums of
    :func:`_sums` (as large as the number of distinct scores: for sequential algorithms over
    them, such as PAVA-BC)."""
    sums = _sums(rows, parts, weighted=weighted)
    sums.pop("p_max"), sums.pop("p_min", None)  # the key p is the score itself
    # p is one value in a level: a sum of w·pᵏ (w·y·pᵏ, v·pᵏ) is pᵏ times the level's Σw (Σwy,
    # Σv), taken on the grouped rows, not summed over the table's (at 10^8 rows on DuckDB each
    # sum left out of the GROUP BY saves about a bare scan's CPU over the rows it reads)
    after = {name: (k, of) for name, (k, of) in _LEVEL_POWERS.items()
             if name in sums and (of in sums or (of == "W" and not weighted))}
    for name in after:
        sums.pop(name)
    out = rows.group_by([*by, "p"]).aggregate(**sums, **(checks(rows) if checks else {}))
    if not after:
        return out
    def base(of: str) -> ir.NumericValue:
        return out["n"].cast("float64") if of == "W" and not weighted else out[of]

    return out.mutate(**{name: _power(out.p, k) * base(of) for name, (k, of) in after.items()})


#: the level sums that are a power of the level's score times another of its sums (name: (k,
#: the sum)): Σwp = p·Σw, Σwp² = p²·Σw, Σwyp = p·Σwy, and under the variance weight Σvp,
#: Σvp², Σvyp (``W`` is n unweighted)
_LEVEL_POWERS = {"swp": (1, "W"), "swpp": (2, "W"), "swyp": (1, "swy"),
                 "sv_p": (1, "sw2"), "sv_pp": (2, "sw2"), "sv_yp": (1, "sw2y")}


def _power(p: ir.FloatingValue, k: int) -> ir.FloatingValue:
    return p if k == 1 else p * p


# -- score intervals: the pieces of the decision rules' intervals ------------------------------


def score_interval(p: ir.FloatingValue, cuts: Sequence[float]) -> ir.IntegerValue:
    """The piece of the score axis cut at ``cuts`` (sorted) holding a score: the number of cuts
    below it, so piece k holds (cuts[k − 1], cuts[k]]. A flat CASE of ``p <= cut`` against
    literals read back bit for bit (:func:`number`): a score equal to a cut stays in the piece
    that cut closes."""
    if not len(cuts):
        return ibis.literal(0, type="int64")
    return ibis.cases(*[(p <= number(c), k) for k, c in enumerate(cuts)],
                      else_=len(cuts)).cast("int64")


def intervals(rows: ir.Table, by: Sequence[str], cuts: Sequence[float], parts: frozenset, *,
              weighted: bool, checks: Callable | None = None) -> ir.Table:
    """One row per group and non-empty piece ``interval`` of the score axis cut at ``cuts``
    (:func:`score_interval`), with the sums of :func:`_sums`."""
    t = rows.mutate(interval=score_interval(rows.p, cuts))
    sums = _sums(t, parts, weighted=weighted)
    return t.group_by([*by, "interval"]).aggregate(**sums, **(checks(t) if checks else {}))


# -- declared summaries (sqlcal.query.declared) and their fused scan --------------------------


def reduce(summary, rows: ir.Table, by: Sequence[str], *, weighted: bool,
           checks: Callable | None = None, soft: bool = True) -> ir.Table:
    """The Ibis reduction of a declared :class:`~sqlcal.query.declared.Summary`."""
    parts = summary.parts
    if summary.kind == "totals":
        return totals(rows, by, parts, weighted=weighted, checks=checks, soft=soft)
    if summary.kind == "uniform":
        bins, convention = summary.params
        return uniform_bins(rows, by, bins, convention, parts, weighted=weighted, checks=checks)
    if summary.kind == "cells":
        return cells(rows, by, summary.params[0], parts, weighted=weighted, checks=checks,
                     soft=soft)
    if summary.kind == "levels":
        return levels(rows, by, parts, weighted=weighted, checks=checks)
    if summary.kind == "logit_cells":  # the log-odds histogram of every row (a first scan)
        t = rows.mutate(lcell=logit_cell(rows.p, summary.params[0]))
        return grouped(t, [*by, "lcell"], _sums(t, parts, weighted=weighted),
                       checks(t) if checks else {}, weighted=weighted, soft=soft)
    if summary.kind == "logit_grid":
        step, clip = summary.params
        return logit_grid(rows, by, step, clip, weighted=weighted, checks=checks, parts=parts)
    if summary.kind == "intervals":
        return intervals(rows, by, summary.params[0], parts, weighted=weighted, checks=checks)
    if summary.kind == "logit_bins":  # equal width in log-odds: pieces between the edges
        return intervals(rows, by, logit_edges(*summary.params)[1:-1], parts, weighted=weighted,
                         checks=checks).rename(bin="interval")
    if summary.kind == "paired_bins":  # sqlcal.compare: two scores of the same rows
        return paired_bins(rows, by, *summary.params, weighted=weighted, checks=checks)
    if summary.kind in ("smooth_cells", "smooth_split"):
        grid, grids = summary.params
        return smooth_cells(rows, by, grid, list(grids), weighted=weighted, checks=checks,
                            straddling=summary.kind == "smooth_split")
    if summary.kind in RECALIBRATION_KINDS:
        return recalibration_reduce(summary, rows, by, weighted=weighted, checks=checks)
    if summary.kind in MULTICLASS_KINDS:
        return multiclass_checks(summary, rows)
    if summary.kind == "temperature_terms":  # recalibration.temperature, on the table as given
        return temperature_terms(summary, rows)
    if summary.kind == "segment_sums":  # sqlcal.segments: one branch per column tuple
        return segment_sums(rows, summary.params, weighted=weighted, checks=checks)
    if summary.kind == "segment_terms":
        return segment_terms(rows, summary.params, weighted=weighted, checks=checks)
    if summary.kind == "segment_overlaps":  # a follow-up: the search validated the rows
        return segment_overlaps(rows, summary.params, weighted=weighted)
    if summary.kind == "cells_within":
        grid, ranges = summary.params
        return cells(within_ranges(rows, by, ranges), by, grid, parts, weighted=weighted,
                     checks=checks, soft=soft)
    if summary.kind == "levels_within":
        return levels(within_ranges(rows, by, summary.params[0]), by, parts, weighted=weighted,
                      checks=checks)
    if summary.kind == "levels_slab":
        lo, hi = summary.params
        return levels(rows.filter(in_range(rows.p, lo, hi)), by, parts, weighted=weighted,
                      checks=checks)
    if summary.kind in ("levels_in_cells", "logit_cells_in_cells"):  # each group its own
        grid, pairs = summary.params[-2:]  # cells: a join, not an IN list
        frame = pd.DataFrame([(*key, c) for key, c in pairs], columns=[*by, "cell"])
        t = _joined_to_cells(rows, by, grid, frame.infer_objects())
        if summary.kind == "levels_in_cells":
            return levels(t, by, parts, weighted=weighted)
        t = t.mutate(lcell=logit_cell(t.p, summary.params[0]))
        return grouped(t, [*by, "lcell"], _sums(t, parts, weighted=weighted), {},
                       weighted=weighted, soft=soft)
    if summary.kind == "logit_cells_within":
        scale, grid, ranges = summary.params
        return logit_cells_within(rows, by, scale, grid, ranges, parts, weighted=weighted,
                                  soft=soft)
    if summary.kind == "extremes_within":
        grid, ranges = summary.params
        return running_extremes(within_ranges(rows, by, ranges), by, grid, weighted=weighted)
    raise ValueError(f"no reduction for summary kind {summary.kind!r}")


def fused(members: Sequence, rows: ir.Table, by: Sequence[str], *, weighted: bool,
          checks: Callable | None = None, soft: bool = True) -> ir.Table:
    """One GROUP BY producing several first-stage summaries at once (totals, equal-width bins,
    score cells): grouped by the keys, each binning's bin (``bin_0``, ``bin_1``, …) and the
    finest cell grid's ``cell``, with the union of the members' sums. A bin and a cell are both
    functions of the score, so each member is the sum of this table's rows over the others' key
    columns (:func:`sqlcal.query.declared.merge`): one scan instead of one per summary.
    """
    keys = {}
    uniform = [s for s in members if s.kind == "uniform"]
    for i, s in enumerate(uniform):
        keys[f"bin_{i}"] = uniform_bin(rows.p, *s.params)
    grids = [s.params[0] for s in members if s.kind == "cells"]
    if grids:
        keys["cell"] = score_cell(rows.p, max(grids))
    scales = [s.params[0] for s in members if s.kind == "logit_cells"]
    if scales:
        keys["lcell"] = logit_cell(rows.p, max(scales))
    logloss = any(s.kind == "totals" and "logloss" in s.parts for s in members)
    t = with_given(rows.mutate(**keys), logloss, soft)
    parts = frozenset().union(*(s.parts for s in members)) | {"sums"}
    sums = _sums(t, parts, weighted=weighted)
    for s in members:
        if s.kind == "totals":
            sums |= totals_sums(t, s.parts, weighted=weighted, soft=soft)
    return grouped(t, [*by, *keys], sums, checks(t) if checks else {}, weighted=weighted,
                   soft=soft)


#: the residual sums that binary labels (y² = y, (y − p)⁺ = y(1 − p)) make linear in Σwy, Σwp,
#: Σwyp, Σwp² and Σw·q² (q = p(1 − p), (1 − 2p)² = 1 − 4q), from those sums of the group
DERIVED = {
    "total": lambda a: a.swy - a.swp,
    "positive": lambda a: a.swy - a.swyp,
    "var": lambda a: a.swp - a.swpp,
    "sw_sq_resid": lambda a: a.swy - 2 * a.swyp + a.swpp,
    "sw_spieg": lambda a: a.swy - 2 * a.swyp - a.swp + 2 * a.swpp,
    "sw_spieg_var": lambda a: (a.swp - a.swpp) - 4 * a.swqq,
}


def grouped(t: ir.Table, keys: Sequence[str], sums: dict, checks: dict, *, weighted: bool,
            soft: bool) -> ir.Table:
    """``t`` grouped by ``keys`` with the aggregates ``sums`` and ``checks``.

    With binary labels (``soft=False``) the residual sums of :data:`DERIVED` are not summed
    row by row: the scan sums the few products they are linear in, and the grouped rows (a
    few thousand) combine them. Measured on DuckDB over 10^7 rows, the default report's fused
    scan took 1.25 CPU s with a formula per residual sum and 0.85 s this way. The combination
    cancels at most W·2^-52 absolutely (every product is in [0, 1] times w), far inside the
    1e-9 relative agreement the numbers keep; a Spiegelhalter numerator of size √W is then off
    by W^(1/2)·2^-52 relatively (1e-11 at W = 10^9).
    """
    derived = [name for name in DERIVED if name in sums] if not soft else []
    if not derived:
        return _aggregate(t, keys, **sums, **checks)
    w = (lambda v: t.w * v) if weighted else (lambda v: v)
    basis = {"swy": w(t.y).sum(), "swp": w(t.p).sum(), "swyp": w(t.y * t.p).sum(),
             "swpp": w(t.p * t.p).sum()}
    if "sw_spieg_var" in derived:
        q = t.p - t.p * t.p
        basis["swqq"] = w(q * q).sum()
    scanned = {k: v for k, v in sums.items() if k not in derived}
    scanned |= {k: v for k, v in basis.items() if k not in scanned}
    out = _aggregate(t, keys, **scanned, **checks)
    out = out.mutate(**{name: DERIVED[name](out) for name in derived})
    return out.select(*keys, *sums, *checks)


# -- smooth ECE: score cells split at the nodes of relplot's grids ---------------------------


def paired_bins(rows: ir.Table, by: Sequence[str], bins: int, convention: str, *,
                weighted: bool, checks: Callable | None = None) -> ir.Table:
    """A paired comparison's summary: the rows carry the score p and a baseline score q
    (:data:`BASELINE`); per group and ``pair`` = bin(p)·(B + 1) + bin(q) of equal-width bins, with
    z = (1, y, p, q), the sums Σw·z (``sw``, ``swy``, ``swp``, ``swq``) and Σw·zzᵀ (``swyy``,
    ``swyp``, ``swyq``, ``swpp``, ``swpq``, ``swqq``); the Brier difference d = (y − p)² −
    (y − q)² as ``swd`` = Σwd, ``swdd`` = Σwd²; the log losses ``swl`` = Σwℓ(p), ``swm`` =
    Σwℓ(q) and their difference e = ℓ(p) − ℓ(q) as ``swe``, ``swee``; ``n_inf``, the rows of
    an infinite loss under either score. Weighted, the same second moments under the variance
    weight v (:func:`variance_weights`) as ``sv…``. Every column is a sum: the summary merges
    by addition, and the cells of a group sum to its totals.
    """
    t = rows.mutate(pair=uniform_bin(rows.p, bins, convention) * (bins + 1)
                    + uniform_bin(rows[BASELINE], bins, convention))
    p, y, q = t.p, t.y, t[BASELINE]
    d = (q - p) * (2 * y - p - q)  # (y − p)² − (y − q)²

    def loss(s):  # 0·ln 0 = 0; a row of infinite loss is counted in n_inf instead
        return -(ibis.ifelse(y > 0, y * ibis.ifelse(s > 0, s, 1.0).ln(), 0.0)
                 + ibis.ifelse(y < 1, (1 - y) * ibis.ifelse(s < 1, 1 - s, 1.0).ln(), 0.0))

    lp, lq = loss(p), loss(q)
    e = lp - lq
    infinite = (((p == 0) | (q == 0)) & (y > 0)) | (((p == 1) | (q == 1)) & (y < 1))
    terms = {"y": y, "p": p, "q": q, "yy": y * y, "yp": y * p, "yq": y * q, "pp": p * p,
             "pq": p * q, "qq": q * q, "d": d, "dd": d * d, "e": e, "ee": e * e}
    w = t.w  # 1.0 on an unweighted source
    # p_min, p_max: the validation this scan carries as a source's first reads them
    sums = {"n": t.count(), "n_inf": t.count(where=infinite), "p_min": p.min(),
            "p_max": p.max(), "sw": w.sum(), "swl": (w * lp).sum(), "swm": (w * lq).sum()}
    sums |= {f"sw{name}": (w * value).sum() for name, value in terms.items()}
    if weighted:
        v = variance_weights(t)[0]
        sums |= {"sv": v.sum(), **{f"sv{name}": (v * value).sum()
                                   for name, value in terms.items()}}
    return _aggregate(t, [*by, "pair"], **sums, **(checks(t) if checks else {}))


def smooth_cells(rows: ir.Table, by: Sequence[str], cells: int, grids: Sequence[int], *,
                 weighted: bool, straddling: bool = False,
                 checks: Callable | None = None) -> ir.Table:
    """The score histogram behind smooth ECE: per group, score cell ``cell`` (of ``cells``, a
    power of two) and interval ``b_<h>`` = FLOOR(p·h) of each grid h in ``grids`` (the cells
    split at the grid nodes i/h, as linear binning onto those grids needs), the sums ``n``,
    ``W``, ``swy``, ``swr`` = Σw(y − p), and ``swd``, ``swyd``, ``swrd``: the same times
    d = p − cell/2^k, the offset from the cell's start (exact in doubles, and no cancellation
    where scores crowd near 1, unlike Σwp and Σwy).

    ``straddling=True`` reads only the rows of cells holding a node of some grid strictly
    inside: cell c holds a node i/h when c·h < i·2^k < (c+1)·h, that is (c·h mod 2^k) > 2^k − h
    (every cell does when h ≥ 2^k)."""
    t = rows.mutate(cell=score_cell(rows.p, cells))
    if straddling and max(grids) < cells:
        t = t.filter(ibis.or_(*((t.cell * h) % cells > cells - h for h in grids)))
    bins = {f"b_{h}": (t.p * h).floor().cast("int64") for h in grids}
    t = t.mutate(**bins, d=t.p - t.cell.cast("float64") / cells, r=t.y - t.p)
    times = (lambda v: t.w * v) if weighted else (lambda v: v)
    # p_min and p_max: validation reads them (a score above 1 sits in the last cell)
    sums = {"n": t.count(), "p_min": t.p.min(), "p_max": t.p.max()}
    sums |= ({"W": t.w.sum()} if weighted else {})
    sums |= {"swy": times(t.y).sum(), "swr": times(t.r).sum(), "swd": times(t.d).sum(),
             "swyd": times(t.y * t.d).sum(), "swrd": times(t.r * t.d).sum()}
    return t.group_by([*by, "cell", *bins]).aggregate(**sums, **(checks(t) if checks else {}))


# -- the summary store's sums (declared once: sqlcal.query.declared.STORE_SUMS) ---------------

#: σ(±4): h(p) = clip(logit p, −4, 4)/4 is flat outside [σ(−4), σ(4)]
_H_LO, _H_HI = 1 / (1 + math.exp(4.0)), 1 / (1 + math.exp(-4.0))


def store_terms(t: ir.Table, sums: Sequence[StoredSum]) -> dict[str, ir.Value]:
    """The row terms the stored ``sums`` multiply that are not columns of the rows (``pq``,
    ``q2``, ``lnp``, ``lnq``, ``h``, ``d4``, ``p4``, and :data:`WEIGHT_SQUARE` for a term with the
    weight twice), to be projected once: the aggregates read them (each aggregate computing its
    own logarithms took five per row)."""
    p = t.p
    used = {f for s in sums for f in (*factors(s.of), *(f for f, _ in s.where))}
    if any(_squares_weight(s.of) for s in sums):
        used.add(WEIGHT_SQUARE)
    terms = {"lnp": lambda: ibis.ifelse(p > 0, p, 1.0).ln(),  # ln 1 = 0 at p = 0
             "lnq": lambda: ibis.ifelse(p < 1, 1 - p, 1.0).ln(),  # ln 1 = 0 at p = 1
             "h": lambda: _logit_clipped(p), "pq": lambda: p * (1 - p),
             "q2": lambda: (1 - 2 * p) * (1 - 2 * p),
             # (1 − p)⁴ − p⁴ factored: no cancellation of two fourth powers near p = 1/2
             "d4": lambda: (1 - 2 * p) * (1 - 2 * p + 2 * p * p),
             WEIGHT_SQUARE: lambda: square(t.w),
             "p4": lambda: square(p * p)}
    return {name: make() for name, make in terms.items() if name in used}


#: the projected column of w² (:func:`square`) the stored w²-sums read
WEIGHT_SQUARE = "ww"


def _squares_weight(of: tuple) -> bool:
    """Whether a stored term holds the weight twice (a w²-sum: sampling weights' v = w²)."""
    return list(of).count("w") == 2


def store_sums(t: ir.Table, sums: Sequence[StoredSum], *, positives: bool = False
               ) -> dict[str, ir.Value]:
    """The aggregates of the stored ``sums`` over a table holding ``p``, ``y``, ``w`` and the
    projected :func:`store_terms`: the one rendering of each declaration. ``positives``: the
    rows are the positives only, where the factor y is 1 and left out. A term with the weight
    twice starts from w² as the scans' variance weight takes it (:func:`square`: 0 below
    :data:`TINY`, where PostgreSQL's w·w raises an underflow), then multiplies the
    other factors left to right, as the scans multiply theirs."""
    def product(of):
        of = [f for f in of if not (positives and f == "y")]
        value = None
        if _squares_weight(of):
            value, of = t[WEIGHT_SQUARE], [f for f in of if f != "w"]
        for f in of:
            term = product(f) if isinstance(f, tuple) else t[f]
            value = term if value is None else value * term
        return value

    out = {}
    for s in sums:
        if not s.of:
            where = [t[f] == v for f, v in s.where if not (positives and f == "y")]
            out[s.name] = t.count(where=ibis.and_(*where)) if where else t.count()
        elif s.merge == "min":
            out[s.name] = product(s.of).min()
        elif s.merge == "max":
            out[s.name] = product(s.of).max()
        else:
            out[s.name] = product(s.of).sum()
    return out


def _logit_clipped(p: ir.FloatingValue) -> ir.FloatingValue:
    pc = ibis.greatest(ibis.least(p, _H_HI), _H_LO)
    return (pc / (1 - pc)).ln() / 4.0


def store_scan(rows: ir.Table, keys: Sequence[str], cells: int, bins: Sequence[tuple], *,
               checks: Callable | None = None) -> ir.Table:
    """A snapshot's first scan: one GROUP BY by ``keys`` (the groups, the period, the delay),
    the finest score cell and each binning's bin (``bin_0``, ...), with every stored sum of the
    totals: the totals, the cells and the bins are each a sum of its rows over the other key
    columns."""
    sums = store_sums_of("totals")
    cols = {"cell": score_cell(rows.p, cells)}
    cols |= {f"bin_{i}": uniform_bin(rows.p, b, c) for i, (b, c) in enumerate(bins)}
    t = rows.mutate(**cols, **store_terms(rows, sums))
    return t.group_by([*keys, *cols]).aggregate(**store_sums(t, sums),
                                                **(checks(t) if checks else {}))


def store_levels(rows: ir.Table, keys: Sequence[str]) -> ir.Table:
    """The stored levels: per ``keys`` and distinct score ``p``, the sums the store's levels
    table carries."""
    sums = store_sums_of("levels")
    t = rows.mutate(**store_terms(rows, sums))
    return t.group_by([*keys, "p"]).aggregate(**store_sums(t, sums))


def store_rows(rows: ir.Table, keys: Sequence[str], table: str, *, cells: int = 0,
               bins: int = 0, free_delay: int, label_delay: int) -> ir.Table:
    """The rows of a store table without their leading columns, as SQL that writes them
    elsewhere (the ``sql/`` folder, the dbt package) computes them: per ``keys`` and the
    table's key (``cell`` of ``cells``, or ``bin`` of ``bins`` sqlcal-convention bins), the
    label-free row over every row (``delay`` = ``free_delay``, label columns 0) and the label
    row of the positives (``delay`` = ``label_delay``, label-free sums 0, minima and maxima
    NULL). Labels are 0/1: Σw·y·f(p) is Σw·f(p) over the positives, where y = 1."""
    free = store_sums_of(table, label=False)
    label = store_sums_of(table, label=True)
    cols = {"cells": {"cell": score_cell(rows.p, cells)} if table == "cells" else {},
            "bins": {"bin": uniform_bin(rows.p, bins, "sqlcal")} if table == "bins" else {},
            }.get(table, {})
    t = rows.mutate(**cols, **store_terms(rows, (*free, *label)))
    group = [*keys, *cols]
    order = [*keys, "delay", *cols, *(s.name for s in store_sums_of(table))]

    def zero(s):
        if s.merge != "sum":
            return ibis.null(s.type)
        return ibis.literal(0, type=s.type)

    a = t.group_by(group).aggregate(**store_sums(t, free))
    a = a.mutate(delay=ibis.literal(free_delay, type="int64"), **{s.name: zero(s) for s in label})
    pos = t.filter(t.y == 1)
    b = pos.group_by(group).aggregate(**store_sums(pos, label, positives=True))
    b = b.mutate(delay=ibis.literal(label_delay, type="int64"), **{s.name: zero(s) for s in free})
    return a.select(order).union(b.select(order))


# -- the recalibration fits' summaries (sqlcal.recalibration.fits) ---------------------------------

#: as :data:`sqlcal.query.declared.EXP_LIMIT` and ``SATURATED`` (this layer cannot import it)
EXP_LIMIT = 700.0
SATURATED = 1e-12
RECALIBRATION_KINDS = ("label_ranges", "logistic_terms", "logistic_meat", "prefix_min",
                       "pav_count", "pav_blocks")


def recalibration_reduce(summary, rows: ir.Table, by: Sequence[str], *, weighted: bool,
                         checks: Callable | None = None) -> ir.Table:
    """The reductions of the recalibration fits' declared summaries (see
    :mod:`sqlcal.query.declared`: ``label_ranges``, ``logistic_terms``, ``logistic_meat``,
    ``prefix_min``, ``pav_count``, ``pav_blocks``)."""
    kind, params = summary.kind, summary.params
    if kind == "label_ranges":
        return label_ranges(rows, by, weighted=weighted, checks=checks)
    if kind == "logistic_terms":
        return logistic_terms(rows, by, *params, weighted=weighted)
    if kind == "logistic_meat":
        return logistic_meat(rows, by, *params, weighted=weighted)
    if kind == "prefix_min":
        return range_prefix_min(rows, by, *params, weighted=weighted)
    if kind == "pav_blocks":
        return pav_blocks(rows, by, *params, weighted=weighted)
    if kind == "pav_count":
        t = pav_blocks(rows, by, *params, weighted=weighted)
        return _aggregate(t, by, blocks=t.count())
    raise ValueError(f"no reduction for summary kind {kind!r}")


def label_ranges(rows: ir.Table, by: Sequence[str], *, weighted: bool,
                 checks: Callable | None = None) -> ir.Table:
    """Per group, where each label lies: ``n``, ``p_min``, ``p_max``, ``pos_mass`` = Σwy,
    ``neg_mass`` = Σw(1 − y), and the least and greatest score of a row of positive weight with
    y > 0 (``pos_min``, ``pos_max``) and with y < 1 (``neg_min``, ``neg_max``): whether the
    score separates the labels."""
    y = rows.y.cast("float64")  # an integer label would sum to NUMERIC in PostgreSQL
    pos_w, neg_w = (rows.w * y, rows.w * (1 - y)) if weighted else (y, 1 - y)
    pos, neg = pos_w > 0, neg_w > 0  # a row of positive weight with y > 0, with y < 1
    # n, p_min, p_max: the validation reads them when this is a source's first scan
    return _aggregate(rows, by, n=rows.count(), p_min=rows.p.min(), p_max=rows.p.max(),
                      pos_mass=pos_w.sum(), neg_mass=neg_w.sum(),
                      pos_min=rows.p.min(where=pos), pos_max=rows.p.max(where=pos),
                      neg_min=rows.p.min(where=neg), neg_max=rows.p.max(where=neg),
                      **(checks(rows) if checks else {}))


def key_match(rows: ir.Table, key: tuple, by: Sequence[str]) -> ir.BooleanValue:
    """Rows of the group with these key values (a NULL key value matches NULL)."""
    return ibis.and_(*(rows[k].isnull() if v is None else rows[k] == v for k, v in zip(by, key)))


def group_value(rows: ir.Table, by: Sequence[str], values: dict) -> ir.FloatingValue:
    """A per-group constant (``values``: key tuple -> float) inlined as a CASE on the group
    keys; NULL for a group not listed."""
    if not by:
        return number(next(iter(values.values())))
    branches = [(key_match(rows, key, by), number(value)) for key, value in values.items()]
    return ibis.cases(*branches, else_=ibis.null("float64"))


def logistic_feature(p: ir.FloatingValue, feature: str, clip: float) -> ir.FloatingValue:
    """The covariate of a logistic fit: logit(p) with p clipped to [clip, 1 − clip], or p."""
    if feature == "score":
        return p
    q = ibis.greatest(ibis.least(p, 1 - clip), clip)
    return (q / (1 - q)).ln()


def sigmoid(eta: ir.FloatingValue) -> ir.FloatingValue:
    """σ(η), the exponent clipped to ±:data:`EXP_LIMIT`."""
    return 1 / (1 + ibis.greatest(ibis.least(-eta, EXP_LIMIT), -EXP_LIMIT).exp())


def logistic_terms(rows: ir.Table, by: Sequence[str], feature: str, clip: float, offset: bool,
                   groups: tuple, *, weighted: bool) -> ir.Table:
    """The Newton terms of σ(a + b·x) at each listed group's coefficients (one aggregate):
    ``r`` = Σw(t − μ), ``rx``, ``h`` = Σwμ(1 − μ), ``hx``, ``hxx``, ``ll`` = Σw(t ln μ +
    (1 − t) ln(1 − μ)), ``sep`` = the target mass where μ is saturated the wrong way; targets
    t = y·hi + (1 − y)·lo. ``groups``: (key tuple, a, b, hi, lo); other groups are left out."""
    t, (a, b, hi, lo) = _with_coefficients(rows, by, groups, ("a", "b", "hi", "lo"))
    x = logistic_feature(t.p, feature, clip)
    w = t.w if weighted else ibis.literal(1.0)
    if offset:
        b = ibis.literal(1.0)
    eta = a + b * x
    # one exponential for σ and log σ: e = exp(−|η|) (never overflows), σ = 1/(1 + e) for
    # η ≥ 0 and e/(1 + e) below, log σ(η) = −log(1 + e) − max(−η, 0), log(1 − σ) = log σ − η
    e = (-eta.abs()).exp()
    mu = ibis.ifelse(eta >= 0, 1 / (1 + e), e / (1 + e))
    log_mu = -(1 + e).ln() - ibis.greatest(-eta, 0.0)
    yt = t.y * hi + (1 - t.y) * lo
    r, h = w * (yt - mu), w * mu * (1 - mu)
    ll = w * (yt * log_mu + (1 - yt) * (log_mu - eta))
    sep = (ibis.ifelse(mu < SATURATED, w * yt, 0.0)
           + ibis.ifelse(mu > 1 - SATURATED, w * (1 - yt), 0.0))
    t = t.mutate(_r=r, _h=h, _x=x, _ll=ll, _sep=sep)
    return _aggregate(t, by, r=t._r.sum(), rx=(t._r * t._x).sum(), h=t._h.sum(),
                      hx=(t._h * t._x).sum(), hxx=(t._h * t._x * t._x).sum(), ll=t._ll.sum(),
                      sep=t._sep.sum())


def _with_coefficients(rows: ir.Table, by: Sequence[str], groups: tuple, names: tuple):
    """The rows of the listed groups with their per-group constants (``groups``: (key tuple,
    *values) in the order of ``names``): joined as a small table on the keys (NULL keys match
    NULL), so each row reads its group's values once; a CASE per constant on the group keys
    cost DuckDB 1.5 times the join at 10 groups (the Newton terms over 10^7 rows: 3.3 against
    2.3 CPU s). Without keys, the values are literals."""
    if not by:
        return rows, [number(v) for v in groups[0][1:]]
    frame = pd.DataFrame([(*key, *values) for key, *values in groups],
                         columns=[*by, *(f"_sqlcal_{n}" for n in names)]).infer_objects()
    m = ibis.memtable(frame)
    t = rows.join(m, [rows[k].identical_to(m[k]) for k in by])
    t = t.select(*rows.columns, *(f"_sqlcal_{n}" for n in names))
    return t, [t[f"_sqlcal_{n}"] for n in names]


def logistic_meat(rows: ir.Table, by: Sequence[str], feature: str, clip: float, offset: bool,
                  groups: tuple, *, weighted: bool) -> ir.Table:
    """Σv(y − μ)²·(1, x, x²) per group (``m00``, ``m01``, ``m11``) at the listed groups'
    coefficients (key tuple, a, b), with the variance weight v (:func:`variance_weights`: w²
    for sampling weights, f/π² under a sampling rate): the middle of the sandwich covariance."""
    x = logistic_feature(rows.p, feature, clip)
    v = variance_weights(rows)[0] if weighted else ibis.literal(1.0)
    a = group_value(rows, by, {g[0]: g[1] for g in groups})
    b = ibis.literal(1.0) if offset else group_value(rows, by, {g[0]: g[2] for g in groups})
    mu = sigmoid(a + b * x)
    t = rows.mutate(_e2=v * (rows.y - mu) ** 2, _x=x)
    return _aggregate(t, by, m00=t._e2.sum(), m01=(t._e2 * t._x).sum(),
                      m11=(t._e2 * t._x * t._x).sum())


def range_prefix_min(rows: ir.Table, by: Sequence[str], cells: int, ranges: tuple, *,
                     weighted: bool) -> ir.Table:
    """:func:`cell_prefix_min` of score ranges given as (key tuple, lo, hi, v), each a cell
    [lo, hi) of the grid of ``cells`` (lo·cells is its exact id): keys, ``lo``, ``s_min``."""
    centres = pd.DataFrame({**{k: [r[0][i] for r in ranges] for i, k in enumerate(by)},
                            "cell": [int(r[1] * cells) for r in ranges],
                            "v": [float(r[3]) for r in ranges]})
    out = cell_prefix_min(rows, by, cells, centres, weighted=weighted)
    return out.select(*by, lo=out.cell.cast("float64") / cells, s_min=out.s_min)


def pav_blocks(rows: ir.Table, by: Sequence[str], passes: int, integer: bool, *,
               weighted: bool) -> ir.Table:
    """The levels (weight > 0) as blocks ``lo``, ``hi``, ``n``, ``W``, ``Y`` = Σwy, after
    ``passes`` grouped PAV passes (:func:`pav_pass`). ``integer``: Y summed as an integer
    (unweighted 0/1 labels), so the merge test is exact cross-multiplication."""
    W = rows.w.sum() if weighted else rows.count()
    Y = rows.y.cast("int64").sum() if integer else (
        (rows.w * rows.y).sum() if weighted else rows.y.sum())
    levels = rows.group_by([*by, "p"]).aggregate(n=rows.count(), W=W, Y=Y)
    # a level of weight 0 would pass the merge test (0 >= 0) with both neighbours and join
    # blocks that must stay apart; it carries nothing, so it goes
    levels = levels.filter(levels.W > 0)
    t = levels.select(*by, lo=levels.p, hi=levels.p, n=levels.n, W=levels.W, Y=levels.Y)
    # passes nest at most PAV_STAGE deep in one query: DuckDB's filter pushdown is exponential
    # in the nesting (8 passes over 4,000 levels: 126 s to plan). Every PAV_STAGE passes the
    # blocks are materialised (a temporary table, kept for the next pass counts), so k passes
    # cost k window passes in all
    done = 0
    while passes - done > PAV_STAGE:
        for _pass in range(PAV_STAGE):
            t = pav_pass(t, by)
        t = _materialised(t)
        done += PAV_STAGE
    for _pass in range(passes - done):
        t = pav_pass(t, by)
    return t


#: grouped PAV passes nested in one query at most (see :func:`pav_blocks`)
PAV_STAGE = 4
#: materialised PAV stages: the stage's query -> its temporary table (the latest few)
_STAGES: dict = {}
_STAGES_MAX = 16


def _materialised(t: ir.Table, key=None) -> ir.Table:
    """``t`` as a temporary table of its engine (computed once per query while kept; ``key``,
    when given, names it instead of the expression object, which Ibis compares by identity)."""
    key = t if key is None else key
    have = _STAGES.pop(key, None)
    if have is None:
        have = t.cache()
    _STAGES[key] = have  # most recent last
    while len(_STAGES) > _STAGES_MAX:
        old = _STAGES.pop(next(iter(_STAGES)))
        try:
            old.release()
        except Exception:  # the session has gone: nothing to free
            pass
    return have


#: score buckets that partition a PAV pass's windows, with the group keys (see :func:`pav_pass`)
PAV_BUCKETS = 1024


def pav_pass(t: ir.Table, by: Sequence[str]) -> ir.Table:
    """One pass: merge every maximal run of adjacent blocks with mean_prev >= mean_next.

    No window spans a whole group's blocks: they are partitioned by the group keys and a score
    bucket (``lo`` on a grid of :data:`PAV_BUCKETS`), so that an engine spreads them over its
    tasks even without ``by``. Within a bucket, a window finds each block's predecessor and
    numbers the runs; one row per bucket (its first and last block, its runs) then tells,
    through windows over the buckets, whether a bucket's first block starts a run (against the
    previous non-empty bucket's last block) and how many runs started before it. The runs are
    those of one window over the whole group."""
    by = list(by)
    part = [*by, "_bucket"]
    b = t.mutate(_bucket=(t.lo * PAV_BUCKETS).floor().cast("int64"))
    within = ibis.window(group_by=part, order_by=b.lo)
    b = b.mutate(_pW=b.W.lag().over(within), _pY=b.Y.lag().over(within),
                 _last=b.lo.lead().over(within).isnull())
    # _start: a block other than its bucket's first that starts a run
    b = b.mutate(_first=b._pW.isnull(),
                 _start=ibis.ifelse(b._pW.isnull() | (b._pY * b.W >= b.Y * b._pW), 0, 1))
    # lo is unique within a group, so this running count has no ties to split
    b = b.mutate(_run=b._start.sum().over(
        ibis.window(group_by=part, order_by=b.lo, rows=(None, 0))))
    ends = b.group_by(part).aggregate(
        _fW=b.W.max(where=b._first), _fY=b.Y.max(where=b._first),
        _lW=b.W.max(where=b._last), _lY=b.Y.max(where=b._last), _inner=b._start.sum())
    buckets = ibis.window(group_by=by, order_by=ends._bucket)
    ends = ends.mutate(_pW=ends._lW.lag().over(buckets), _pY=ends._lY.lag().over(buckets))
    ends = ends.mutate(_runs=ends._inner + ibis.ifelse(
        ends._pW.notnull() & (ends._pY * ends._fW >= ends._fY * ends._pW), 0, 1))
    # a block's run: the runs started up to its bucket (inclusive), less the bucket's own inner
    # starts, plus those up to the block
    ends = ends.select(*part, _off=ends._runs.sum().over(ibis.window(
        group_by=by, order_by=ends._bucket, rows=(None, 0))) - ends._inner)
    marked = _join_on_keys(b, ends, part)
    marked = marked.mutate(run=marked._run + marked._off)
    return marked.group_by([*by, "run"]).aggregate(
        lo=marked.lo.min(), hi=marked.hi.max(), n=marked.n.sum(), W=marked.W.sum(),
        Y=marked.Y.sum()).drop("run")


def _join_on_keys(left: ir.Table, right: ir.Table, keys: list) -> ir.Table:
    """``left`` with ``right``'s other columns, matched on the group keys and ``_bucket`` (the
    last key): a NULL group key matches NULL; the bucket, never NULL, is matched by equality, so
    that every engine can hash on it (PostgreSQL hashes no IS NOT DISTINCT FROM)."""
    right = right.rename({f"_k{i}": k for i, k in enumerate(keys)})
    on = [left[keys[-1]] == right[f"_k{len(keys) - 1}"]] + [
        left[k].identical_to(right[f"_k{i}"]) for i, k in enumerate(keys[:-1])]
    return left.join(right, on).drop(*(f"_k{i}" for i in range(len(keys))))


# -- multiclass tables (sqlcal.multiclass): their checks and their binary rows ---------------
#
# A layout names the columns of a multiclass table: ``("wide", keys, probs, label, weight,
# values)`` (one probability column per class, the true class in ``label``, ``values`` the label
# value of each column) or ``("long", keys, example, cls, prob, label, weight)`` (one row per
# example and class, ``label`` 1 on the true class's row). The checks are declared summaries of
# the table as given (:func:`sqlcal.query.declared.multiclass_check`).

MULTICLASS_KINDS = ("multiclass_quick", "multiclass_counts", "multiclass_unmatched")
_LARGEST = float(np.finfo(np.float64).max)


def multiclass_columns(t: ir.Table, layout: tuple) -> tuple:
    """The probabilities (wide: a list, one per class; long: one expression), the label (long:
    0/1, a boolean read as 1/0) and the weight (None without one) of a multiclass table."""
    weight = layout[-2] if layout[0] == "wide" else layout[-1]
    w = t[weight].cast("float64") if weight else None
    if layout[0] == "wide":
        return [t[c].cast("float64") for c in layout[2]], t[layout[3]], w
    col = t[layout[5]]
    y = ibis.cases((col, 1), (~col, 0)) if col.type().is_boolean() else col  # NULL stays NULL
    return t[layout[4]].cast("float64"), y, w


def multiclass_value_checks(t: ir.Table, layout: tuple) -> list:
    """Per-row checks of a multiclass table, in the order :mod:`sqlcal.query.layouts` names them:
    wide: each probability column NULL, NaN or outside [0, 1], the label NULL, the weight
    invalid; long: the probability, the label NULL or not 0/1, the class NULL, the weight."""
    p, y, w = multiclass_columns(t, layout)
    if layout[0] == "wide":
        checks = [_bad_prob(pk) for pk in p] + [y.isnull()]
    else:
        checks = [_bad_prob(p), y.isnull() | ((y != 0) & (y != 1)).fill_null(True),
                  t[layout[3]].isnull()]
    return checks + ([_bad_weight(w)] if w is not None else [])


def _bad_prob(p: ir.FloatingValue) -> ir.BooleanValue:
    # NULL or NaN, or outside [0, 1]; never NULL itself, so it can be counted and negated
    return p.isnull() | (p.isnan() | (p < 0) | (p > 1)).fill_null(True)


def _bad_weight(w: ir.FloatingValue) -> ir.BooleanValue:
    return w.isnull() | (w.isnan() | (w < 0) | (w > _LARGEST)).fill_null(True)


def _any_of(conditions) -> ir.BooleanValue:
    result = ibis.literal(False)
    for c in conditions:
        result = result | c
    return result


def _class_literals(t: ir.Table, layout: tuple) -> list:
    label_type = t[layout[3]].type()
    return [ibis.literal(v, type=label_type) for v in layout[5]]


def multiclass_checks(summary, t: ir.Table) -> ir.Table:
    """The check queries of a multiclass table (params: layout, sum_tolerance), one row each.

    ``multiclass_quick``: the one cheap aggregate proving every example valid (counts for
    NULLs, MIN/MAX for ranges, the extreme sums; wide: labels outside the classes; long: per
    example its rows, true rows, sum and invalid values, and the number of classes ``k``).
    ``multiclass_counts``: each problem counted, to name it (``n``, ``bad``, ``v<i>`` per value
    check, and the layout's problems). ``multiclass_unmatched`` (wide): the five most frequent
    label values matching no class, with their counts ``n_``."""
    layout, sum_tolerance = summary.params
    checks = multiclass_value_checks(t, layout)
    p, y, w = multiclass_columns(t, layout)
    if layout[0] == "wide":
        values = _class_literals(t, layout)
        total = sum(p[1:], p[0])
        if summary.kind == "multiclass_quick":
            columns = [*p, *([w] if w is not None else [])]
            return t.aggregate(
                n=t.count(), y_n=y.count(), unmatched=t.count(where=~y.isin(values)),
                s_lo=total.min(), s_hi=total.max(),
                **{f"{name}{i}": agg for i, c in enumerate(columns)
                   for name, agg in (("n", c.count()), ("lo", c.min()), ("hi", c.max()))})
        good = ~_any_of(checks)
        unmatched = good & ~y.isin(values)
        if summary.kind == "multiclass_unmatched":
            label = layout[3]
            return (t.filter(unmatched).group_by(label).aggregate(n_=lambda s: s.count())
                    .order_by([ibis.desc("n_"), label]).limit(5))
        off = good & ~unmatched & ((total - 1).abs() > sum_tolerance)
        return t.aggregate(
            n=t.count(), bad=t.count(where=~good), unmatched=t.count(where=unmatched),
            unmatched_values=y.nunique(where=unmatched), off=t.count(where=off),
            off_max=total.max(where=off), off_min=total.min(where=off),
            **{f"v{i}": t.count(where=e) for i, e in enumerate(checks)})
    ex = [*layout[1], layout[2]]
    cls = layout[3]
    if summary.kind == "multiclass_quick":
        per = t.group_by(ex).aggregate(
            n_rows=t.count(), n_true=t.count(where=y == 1), total=p.sum(),
            bad=t.count(where=_any_of(checks)),
            **({"w_min": w.min(), "w_max": w.max()} if w is not None else {}))
        quick = per.aggregate(
            n=per.count(), bad=per.count(where=per.bad > 0), rows_lo=per.n_rows.min(),
            rows_hi=per.n_rows.max(), not_one=per.count(where=per.n_true != 1),
            s_lo=per.total.min(), s_hi=per.total.max(),
            varies=(per.count(where=per.w_max > per.w_min) if w is not None
                    else ibis.literal(0)))
        return quick.cross_join(t.aggregate(k=t[cls].nunique()))
    per = t.group_by(ex).aggregate(
        n_rows=t.count(), n_classes=t[cls].nunique(), n_true=t.count(where=y == 1),
        total=p.sum(), **({"w_min": w.min(), "w_max": w.max()} if w is not None else {}),
        **{f"v{i}": t.count(where=e) for i, e in enumerate(checks)})
    good = ~_any_of(per[f"v{i}"] > 0 for i in range(len(checks)))
    repeated = good & (per.n_rows > per.n_classes)
    single = good & ~repeated
    off = single & ((per.total - 1).abs() > sum_tolerance)
    return per.aggregate(
        n=per.count(), bad=per.count(where=~good), repeated=per.count(where=repeated),
        no_true=per.count(where=single & (per.n_true == 0)),
        several=per.count(where=single & (per.n_true > 1)),
        off=per.count(where=off), off_max=per.total.max(where=off),
        off_min=per.total.min(where=off),
        **({"varies": per.count(where=good & (per.w_max > per.w_min))} if w is not None else {}),
        **{f"v{i}": per.count(where=per[f"v{i}"] > 0) for i in range(len(checks))})


def multiclass_rows(t: ir.Table, layout: tuple, mode: str, *, drop: bool = False) -> ir.Table:
    """The binary (score, label) rows of a multiclass table: top-label (one row per example,
    the top probability and whether its class is the true one) or classwise (one row per
    example and class, with ``class``); ``drop`` leaves out the examples failing a value check
    (long: every row of such an example)."""
    keys = list(layout[1])
    if layout[0] == "wide":
        if drop:
            t = t.filter(~_any_of(multiclass_value_checks(t, layout)))
        p, y, w = multiclass_columns(t, layout)
        values = _class_literals(t, layout)
        carried = {"weight": w} if w is not None else {}
        if mode == "classwise":
            return ibis.union(*[
                t.select(*keys, **{"class": v}, score=pk, label=ibis.ifelse(y == v, 1, 0),
                         **carried)
                for pk, v in zip(p, values)])
        top = ibis.greatest(*p)
        # the first column reaching the top probability is the predicted class
        correct = ibis.cases(*[(pk == top, ibis.ifelse(y == v, 1, 0))
                               for pk, v in zip(p, values)])
        predicted = ibis.cases(*[(pk == top, v) for pk, v in zip(p, values)])
        return t.select(*keys, predicted_class=predicted, score=top, label=correct, **carried)
    ex = [*keys, layout[2]]
    cls = layout[3]
    if drop:
        bad = ibis.ifelse(_any_of(multiclass_value_checks(t, layout)), 1, 0)
        t = t.mutate(sqlcal_bad_=bad.max().over(ibis.window(group_by=ex)))
        t = t.filter(t.sqlcal_bad_ == 0).drop("sqlcal_bad_")
    p, y, w = multiclass_columns(t, layout)
    carried = {"weight": w} if w is not None else {}
    if mode == "classwise":
        return t.select(*keys, **{"class": t[cls]}, score=p, label=y, **carried)
    # the top class of each example: a window partitioned by example (never over all rows);
    # ties go to the smallest class value
    rank = ibis.row_number().over(ibis.window(group_by=ex, order_by=[p.desc(), t[cls].asc()]))
    ranked = t.mutate(sqlcal_rank_=rank)
    top = ranked.filter(ranked.sqlcal_rank_ == 0)
    p, y, w = multiclass_columns(top, layout)
    return top.select(*keys, predicted_class=top[cls], score=p, label=y,
                      **({"weight": w} if w is not None else {}))


# -- softmax and temperature scaling of multiclass tables (sqlcal.recalibration.temperature) -------


#: 1.0 as a double (a bare literal is NUMERIC in PostgreSQL, and its sums come back as Decimal)
_ONE = ibis.literal(1.0).cast("float64")


def _exp_clipped(x: ir.FloatingValue) -> ir.FloatingValue:
    # x <= 0 here; PostgreSQL's exp() raises on underflow, so x is clipped at -EXP_LIMIT
    return ibis.greatest(x, -EXP_LIMIT).exp()


def multiclass_log_scores(p, logits: bool, clip: float | None):
    """z of a class: its logit, or log max(p, clip); log p without a clip, NULL where p <= 0
    (never log 0, which PostgreSQL refuses)."""
    if logits:
        return p
    if clip is not None:
        return ibis.greatest(p, clip).ln()
    return ibis.ifelse(p > 0, p.ln(), ibis.null("float64"))


def softmax_wide(z: list, beta, *, zero: list | None = None) -> list:
    """softmax(β·z) of one row's class scores, shifted by the row's largest z (stable);
    ``zero``: per class, a condition under which its probability is 0 (a probability of 0)."""
    m = ibis.greatest(*[zk.fill_null(-_LARGEST) for zk in z]) if zero else ibis.greatest(*z)
    e = [_exp_clipped(beta * (zk - m)) for zk in z]
    if zero:
        e = [ibis.ifelse(cond, 0.0, ek) for ek, cond in zip(e, zero)]
    total = sum(e[1:], e[0])
    return [ek / total for ek in e]


def softmax_long(t: ir.Table, z: ir.FloatingValue, example: Sequence[str], beta, name: str,
                 zero=None) -> ir.Table:
    """``t`` with column ``name`` = softmax(β·z) over the rows of each example (windows
    partitioned by example), shifted by the example's largest z; ``zero``: rows whose
    probability is 0. The example's largest z is taken in a subquery first (engines refuse a
    window nested in a window or an aggregate: a condition on the windowed column, true on
    every row, makes it one)."""
    window = ibis.window(group_by=list(example))
    marked = t.mutate(sqlcal_z_=z, sqlcal_e_=_exp_clipped(beta * (z - z.max().over(window))),
                      **({"sqlcal_zero_": zero} if zero is not None else {}))
    marked = marked.filter(marked.sqlcal_e_.isnull() | marked.sqlcal_e_.notnull())
    e = marked.sqlcal_e_
    if zero is not None:
        e = ibis.ifelse(marked.sqlcal_zero_, 0.0, e)
    out = marked.mutate(**{name: e / e.sum().over(window)})
    return out.drop(*[c for c in ("sqlcal_z_", "sqlcal_e_", "sqlcal_zero_") if c in out.columns])


def multiclass_softmax(t: ir.Table, layout: tuple) -> ir.Table:
    """The table with the layout's probability columns holding the softmax of the logits they
    held (``sqlcal.multiclass(logits=...)``): a NULL, NaN or infinite logit gives NaN or NULL,
    which the checks then count."""
    if layout[0] == "wide":
        z = [t[c].cast("float64") for c in layout[2]]
        return t.mutate(**dict(zip(layout[2], softmax_wide(z, _ONE))))
    example = [*layout[1], layout[2]]
    soft = softmax_long(t, t[layout[4]].cast("float64"), example, _ONE,
                        "sqlcal_p_")
    soft = soft.mutate(**{layout[4]: soft.sqlcal_p_}).drop("sqlcal_p_")
    # the same subquery trick: the checks and the rows aggregate this column
    return soft.filter(soft[layout[4]].isnull() | soft[layout[4]].notnull())


def temperature_terms(summary, t: ir.Table) -> ir.Table:
    """The terms of a temperature-scaling fit at each listed group's β (one aggregate; the long
    layout first reduces each example's rows): see
    :func:`sqlcal.query.declared.temperature_terms`."""
    layout, logits, clip, groups = summary.params
    keys = list(layout[1])
    betas = {g[0]: g[1] for g in groups}
    every = not groups  # no groups listed: every group at β = 1

    def beta_of(rows):
        return _ONE if every else group_value(rows, keys, betas)
    p, y, w = multiclass_columns(t, layout)
    if layout[0] == "wide":
        z = [multiclass_log_scores(pk, logits, clip) for pk in p]
        m = ibis.greatest(*z)
        d = [zk - m for zk in z]
        beta = beta_of(t)
        e = [_exp_clipped(beta * dk) for dk in d]
        values = _class_literals(t, layout)
        rows = t.mutate(
            _S=sum(e[1:], e[0]), _A=sum((ek * dk for ek, dk in zip(e[1:], d[1:])), e[0] * d[0]),
            _B=sum((ek * dk * dk for ek, dk in zip(e[1:], d[1:])), e[0] * d[0] * d[0]),
            _dy=ibis.cases(*[(y == v, dk) for dk, v in zip(d, values)]),
            _dbar=sum(d[1:], d[0]) / len(d), _w=w if w is not None else _ONE,
            _beta=beta, **{f"_p{i}": pk for i, pk in enumerate(p)})
        zeros = [] if logits else [(f"zeros{i}", f"_p{i}") for i in range(len(p))]
    else:
        example = [*keys, layout[2]]
        z = multiclass_log_scores(p, logits, clip)
        d = z - z.max().over(ibis.window(group_by=example))
        shifted = t.mutate(_d=d, _y=y.cast("float64"), _p=p,
                           _w=w if w is not None else _ONE)
        # a condition on the windowed column (true on every row) makes it a subquery: engines
        # refuse a window function nested in an aggregate
        shifted = shifted.filter((shifted._d <= 0) | shifted._d.isnull())
        beta = beta_of(shifted)
        shifted = shifted.mutate(_e=_exp_clipped(beta * shifted._d), _beta=beta)
        rows = shifted.group_by(example).aggregate(
            _S=shifted._e.sum(), _A=(shifted._e * shifted._d).sum(),
            _B=(shifted._e * shifted._d * shifted._d).sum(), _dy=(shifted._d * shifted._y).sum(),
            _dbar=shifted._d.mean(), _w=shifted._w.max(), _beta=shifted._beta.max(),
            _zeros=shifted.count(where=shifted._p <= 0))
        zeros = [] if logits else [("zeros", "_zeros")]
    if keys and not every:
        rows = rows.filter(rows._beta.notnull())
    counts = {name: (rows[col].sum() if name == "zeros" else rows.count(where=rows[col] <= 0))
              for name, col in zeros}
    mean = rows._A / rows._S
    return _aggregate(
        rows, keys, n=rows.count(), W=rows._w.sum(),
        nll=(rows._w * (rows._S.ln() - rows._beta * rows._dy)).sum(),
        g=(rows._w * (mean - rows._dy)).sum(),
        h=(rows._w * ibis.greatest(rows._B / rows._S - mean * mean, 0.0)).sum(),
        g0=(rows._w * (rows._dbar - rows._dy)).sum(), gap=(-rows._w * rows._dy).sum(),
        **counts)


def comparable(col: ir.Value, value) -> bool:
    """Whether a column can be compared with a Python value (an Ibis literal of it)."""
    try:
        col == ibis.literal(value)  # noqa: B015 (raises when the types cannot be compared)
    except Exception:
        return False
    return True


def is_bound(t: ir.Table) -> bool:
    """Whether the table can be queried (an unbound ibis.table(schema) is for SQL export)."""
    return engines.is_bound(t)


# -- segments: per-segment sums over feature-value conjunctions (sqlcal.segments) ------------

#: how the search keys a feature's value (:func:`segment_value`): a value is
#: :data:`SEGMENT_VALUE` followed by the value cast to a string; a NULL feature is
#: :data:`SEGMENT_NULL` and the values pooled into a feature's "other" bucket (each too rare to be
#: a segment of its own) are :data:`SEGMENT_OTHER`. Neither starts with :data:`SEGMENT_VALUE`,
#: so no value of the data (``"__null__"``, ``"__other__"``, ``""``, ...) can be taken for NULL,
#: for the bucket, or for another value
SEGMENT_VALUE = "="
SEGMENT_NULL = "null"
SEGMENT_OTHER = "other"
#: folds: rows are assigned by the score's bits (x = p·C + Σ split·φ; u = 2·dist(x, ℤ)), pure
#: double arithmetic every engine evaluates alike; 2 is the holdout, 0 fold A, 1 fold B
_FOLD_SCALE = 9_999_991.0
_FOLD_SPLIT = 0.6180339887498949


def segment_value(col: ir.Value) -> ir.StringValue:
    """A feature's value as the search keys it: :data:`SEGMENT_VALUE` and the value as a string,
    or :data:`SEGMENT_NULL` for NULL (so a NULL key means "free")."""
    return ibis.ifelse(col.isnull(), ibis.literal(SEGMENT_NULL),
                       ibis.literal(SEGMENT_VALUE) + col.cast("string"))


def segment_code(value: str) -> str:
    """The key of a feature's value (its string), as :func:`segment_value` makes it.

    >>> segment_code("__null__")
    '=__null__'
    """
    return SEGMENT_VALUE + value


def segment_fold(t: ir.Table, holdout: float, a_share: float, split: Sequence[str]
                 ) -> ir.IntegerValue:
    """The fold of each row: 2 with probability ``holdout``, else 0 (fold A) with probability
    ``a_share``, else 1 (fold B); a function of the score and the ``split`` columns only (never
    of the label)."""
    x = t.p * number(_FOLD_SCALE)
    for col in split:
        x = x + t[col].cast("float64") * number(_FOLD_SPLIT)
    u = fractional_part(x) * 2
    return ibis.cases((u < number(holdout), 2),
                      (u < number(holdout + (1 - holdout) * a_share), 0),
                      else_=1).cast("int64")


def segment_condition(t: ir.Table, predicates: Sequence[tuple]) -> ir.BooleanValue:
    """Rows of a segment: ``predicates`` are ``(feature, key, kept)``, key a value's key as
    :func:`segment_value` gives it (:data:`SEGMENT_NULL` for NULL), or :data:`SEGMENT_OTHER` for
    the rows whose key is not among ``kept``. Compared in the column's own type (no per-row
    cast)."""
    out = []
    for feature, value, kept in predicates:
        col = t[feature]
        out.append(~_among(col, kept) if value == SEGMENT_OTHER else _among(col, (value,)))
    return ibis.and_(*out)


def _among(col: ir.Value, keys: Sequence[str]) -> ir.BooleanValue:
    """Whether a feature's value is one of ``keys`` (:func:`segment_value`'s, NULL's among
    them), in the column's own type; never NULL."""
    plain = _typed(col, [k for k in keys if k not in (SEGMENT_NULL, SEGMENT_OTHER)])
    return ibis.cases((col.isnull(), ibis.literal(SEGMENT_NULL in keys)),
                      else_=col.isin(plain) if plain else ibis.literal(False))


def segment_cover(tuples: Sequence[tuple], sizes: Sequence[float], limit: float
                  ) -> list[tuple[tuple, list]]:
    """Sets of columns that together hold every column tuple in ``tuples``, each with at most
    ``limit`` value combinations (the product of its columns' ``sizes``) unless one tuple alone
    has more: ``(columns, indices of the tuples it holds)`` pairs, every tuple in exactly one.
    Greedy: start from the uncovered tuple with the most combinations, add the column that
    brings the most uncovered tuples inside (fewest values on a tie) while the product stays
    within ``limit``. One GROUP BY per set then gives all its tuples' sums by re-aggregation.

    Examples
    --------
    >>> segment_cover([(0, 1), (0, 2), (1, 2), (2, 3)], [2, 3, 4, 100], 50)
    [((2, 3), [3]), ((0, 1, 2), [0, 1, 2])]
    """
    size = np.log(np.maximum(np.asarray(sizes, float), 1.0))
    cap = np.log(max(float(limit), 1.0)) + 1e-9
    left = {tuple(t): i for i, t in enumerate(tuples)}
    out = []
    while left:
        seed = max(left, key=lambda t: (float(size[list(t)].sum()), t))
        cols = set(seed)
        while True:
            room = cap - float(size[list(cols)].sum())
            best = None
            for j in range(len(size)):
                if j in cols or size[j] > room:
                    continue
                gain = sum(1 for t in left if j in t and set(t) <= cols | {j})
                if gain and (best is None or (gain, -size[j]) > best[0]):
                    best = ((gain, -size[j]), j)
            if best is None:
                break
            cols.add(best[1])
        inside = sorted((i for t, i in left.items() if set(t) <= cols))
        for t in [t for t in left if set(t) <= cols]:
            del left[t]
        out.append((tuple(sorted(cols)), inside))
    return out


#: the most value combinations (times score bins) one covering GROUP BY of a level may hold.
#: Measured at 10^7 rows, 20 features, depth 3 (the table of bench/bench_segments.py, one-off
#: runs, CPU s of the whole search): 432 at 2^14, 364 at 2^16 (level 2: 44 -> 22, level 3:
#: 367 -> 325); one GROUP BY's cost grows with its groups (0.85 s at 45k groups, 1.6 at 180k,
#: 4.0 at 1.1M per 10^7 rows), so far larger sets lose what they save in scans
SEGMENT_COVER_GROUPS = 2**16


def segment_plan(tuples: Sequence[tuple], cover: Sequence[int], bins: int = 0,
                 candidates: Sequence[tuple] | None = None) -> list[tuple[tuple, list, dict]]:
    """The covering GROUP BYs of a level (:func:`segment_cover`): ``cover`` holds each
    feature's number of distinct raw values (NULL included); score bins multiply every set's
    combinations; empty: no covering (one base-table branch per tuple). Each set comes as
    ``(columns, tuple indices, narrowed)``: ``narrowed`` maps a column of a set over the limit
    (a single tuple whose raw values alone have more combinations) to the values its
    ``candidates`` (``(tuple index, values)`` pairs) hold in that column, when these are at
    most half its raw values less two: that column is grouped by those values, by "pooled"
    and by "neither" (:func:`segment_sums`), so the GROUP BY holds the candidates' few
    combinations, not every raw one (three columns of 100, 300 and 800 values: 24 million).

    Examples
    --------
    >>> segment_plan([(0, 1)], [2, 800], 0, [(0, ("0", "5")), (0, ("1", "5"))])
    [((0, 1), [0], {})]
    >>> segment_plan([(0, 1)], [2**10, 800], 0, [(0, ("0", "5")), (0, ("1", "5"))])
    [((0, 1), [0], {0: ('0', '1'), 1: ('5',)})]
    """
    if not cover:
        return [(tuple(t), [i], {}) for i, t in enumerate(tuples)]
    limit = max(1.0, SEGMENT_COVER_GROUPS / max(bins, 1))
    plan = segment_cover(tuples, cover, limit)
    over = {members[0] for cols, members in plan
            if len(members) == 1 and math.prod(cover[j] for j in cols) > limit}
    seen = {i: [set() for _ in tuples[i]] for i in over} if candidates is not None else {}
    for i, values in candidates if seen else ():  # one pass over the candidates
        if i in seen:
            for c, v in enumerate(values):
                seen[i][c].add(v)
    out = []
    for cols, members in plan:
        narrowed = {}
        if members[0] in seen and len(members) == 1:
            for c, j in enumerate(tuples[members[0]]):
                values = tuple(sorted(seen[members[0]][c]))
                if len(values) + 2 <= cover[j] / 2:
                    narrowed[j] = values
        out.append((cols, members, narrowed))
    return out


def segment_sizes(plan: list, cover: Sequence[int]) -> list[int]:
    """Each covering GROUP BY's most value combinations: a narrowed column counts its
    candidates' values plus "pooled" and "neither" (:func:`segment_plan`).

    >>> segment_sizes([((0, 1), [0], {0: ('0', '1'), 1: ('5',)})], [2**10, 800])
    [12]
    """
    return [math.prod(len(narrowed[j]) + 2 if j in narrowed else cover[j] for j in cols)
            for cols, _, narrowed in plan]


def _typed(col: ir.Value, values: Sequence[str]) -> list:
    """``values`` (keys of values as :func:`segment_value` gives them) as literals of ``col``'s
    type: the engines cast an integer to its decimal digits and a boolean to ``true`` or
    ``false``, so the literal is exactly the value the key was made from."""
    values = [v[len(SEGMENT_VALUE):] for v in values]
    if col.type().is_string():
        return values
    if col.type().is_integer():
        return [int(v) for v in values]
    if col.type().is_boolean():
        return [v.lower() == "true" for v in values]
    raise TypeError(f"a {col.type()} feature has no segments")  # pragma: no cover


def _narrowed(col: ir.Value, values: Sequence[str], kept: Sequence[str]
              ) -> tuple[ir.Value, ir.IntegerValue]:
    """A column of an over-limit covering set (:func:`segment_plan`) grouped by its candidates'
    ``values`` only: per row the value when it is one of them (else NULL) and a class, 0 for
    those values, 1 for a row of the pooled bucket (a value outside ``kept``, NULL included
    unless kept) when the candidates hold :data:`SEGMENT_OTHER`, 2 for every other row (in
    no candidate). Compared in the column's own type (no per-row cast)."""
    inside = _among(col, values)
    if SEGMENT_OTHER in values:
        cls = ibis.cases((inside, 0), (~_among(col, kept), 1), else_=2)
    else:
        cls = ibis.cases((inside, 0), else_=2)
    return ibis.cases((inside, col), else_=ibis.null(col.type())), cls.cast("int8")


def _narrowed_value(key: ir.Value, cls: ir.IntegerValue) -> ir.StringValue:
    """The segment value of a narrowed column's cell (:func:`_narrowed`): its value, the pooled
    bucket, or NULL (no candidate: the semi-join drops it)."""
    return ibis.cases((cls == 0, segment_value(key)), (cls == 1, ibis.literal(SEGMENT_OTHER)),
                      else_=ibis.null("string"))


def segment_sums(rows: ir.Table, params: tuple, *, weighted: bool,
                 checks: Callable | None = None) -> ir.Table:
    """Per fold, group, segment (and score bin): ``n``, ``W``, Σwy, Σwp, Σwp², Σwyp, Σw²,
    ``var2`` = Σw²p(1 − p), ``p_min``, ``p_max``; one UNION ALL branch per column tuple, keyed
    by ``sqlcal_tuple`` (the tuple's index in ``tuples``) and ``sqlcal_v0``, ``sqlcal_v1``, ...
    (the values of the tuple's columns, in its order). ``params``: see
    :func:`sqlcal.query.declared.segment_sums`. From level 2 on, each feature's values outside
    ``kept`` are recoded to :data:`SEGMENT_OTHER` and the union's aggregated rows are
    semi-joined once to the candidates (after aggregation: a hash probe per group, not per
    row). The branches share their key and sum columns by name, so the statement stays small:
    Ibis compiles it in about 0.01 s a branch. With ``cover`` (level 2 on), a tuple's branch
    re-aggregates the covering GROUP BY of :func:`segment_plan` that holds it: the table is
    read once per covering set, grouped by the raw columns, and only the small aggregate is
    cast and recoded."""
    (by, features, (holdout, a_share, split), bins, tuples, kept, candidates, cube, cover,
     extremes) = params

    def fresh_keys(r: ir.Table) -> dict:
        keys = {"sqlcal_fold": segment_fold(r, holdout, a_share, split)}
        if bins:
            keys["bin"] = uniform_bin(r.p, bins, "sqlcal")
        return keys

    def recode(f: str, v: ir.StringValue) -> ir.StringValue:
        if kept is None:  # level 1: every value
            return v
        k = kept[features.index(f)]
        return ibis.cases((v.isin(list(k)), v), else_=SEGMENT_OTHER) if k else \
            ibis.literal(SEGMENT_OTHER)

    parts = frozenset({"sums", "moments", "sw2"})
    group_keys = ["sqlcal_fold", *by, *(["bin"] if bins else [])]

    def cells_of(b: ir.Table, columns: Sequence[str]) -> ir.Table:
        """The sums (and validation checks) of ``b``'s rows per fold, group and ``columns``."""
        sums = _sums(b, parts, weighted=weighted)
        if weighted:
            sums["var2"] = null_variance(b, b.p * (1 - b.p), (b.y - b.p) ** 2).sum()
        if extremes:  # the largest (y − p)²: (1 − least p of y = 1)² or (largest p of y = 0)²
            sums |= {"p_min_pos": b.p.min(where=b.y == 1), "p_max_neg": b.p.max(where=b.y == 0)}
        return _aggregate(b, [*group_keys, *columns], **sums, **(checks(b) if checks else {}))

    def merged(cells: ir.Table, columns: Sequence[str]) -> dict:
        """Re-aggregation of ``cells``: MIN of a minimum, MAX of a maximum, else SUM."""
        return {c: getattr(cells[c], "min" if c in MERGED_BY_MIN else
                           "max" if c in MERGED_BY_MAX else "sum")()
                for c in cells.columns if c not in (*group_keys, *columns)}

    width = max(len(tup) for tup in tuples)
    names = [f"sqlcal_v{j}" for j in range(width)]
    # no per-row filter on the candidates' values: each branch's IN lists of strings (DuckDB: a
    # MARK join per list per branch) cost 20x the GROUP BYs at 20 features (depth 2, 190
    # branches, 10^5 rows: 109 CPU s with them, 4.9 s without); the semi-join after
    # aggregation keeps exactly the candidates

    def branch(cells: ir.Table, columns: Sequence[str], i: int, tup: Sequence[int]
               ) -> ir.Table:
        group = {"sqlcal_fold": cells.sqlcal_fold, **{k: cells[k] for k in by},
                 **{n: cells[features[j]] for n, j in zip(names, tup)},
                 **({"bin": cells.bin} if bins else {})}
        # the tuple's index rides along as a constant column of the aggregate (a further
        # projection would cost Ibis a select-merge rewrite per branch)
        return cells.group_by(**group).aggregate(**merged(cells, columns),
                                                 sqlcal_tuple=ibis.literal(i, type="int64"))

    if cube:
        # the reduced cube: the sums per fold, group and recoded feature tuple, kept as a
        # temporary table of the engine (one base-table scan) under the search's token
        # ``cube``, so every level of one search aggregates the same table
        t = rows.mutate(**fresh_keys(rows))
        t = t.mutate(**{f: recode(f, segment_value(t[f])) for f in features})
        cells = _materialised(cells_of(t, features), key=("segment_cube", cube))
        branches = [branch(cells, features, i, tup) for i, tup in enumerate(tuples)]
    else:
        # covering GROUP BYs: one base-table scan per set of columns whose raw values have few
        # combinations, grouped by the columns as they are (no per-row cast or recoding); the
        # small aggregate (a CTE) is recoded and re-aggregated for every tuple inside the set,
        # so a level reads the table once per set, not once per column tuple. Level 1 (no
        # ``cover``) groups each feature alone the same way: no per-row cast. The validation
        # checks are aggregated with the rows and merged like the sums.
        branches = []
        for cols, members, narrowed in segment_plan(tuples, cover, bins, candidates):
            columns = [features[j] for j in cols]
            # only the set's columns: each set reads the table itself, so no relation of every
            # row is shared by the sets (DuckDB would keep it: about 70 bytes a row)
            b = rows.select(*dict.fromkeys(c for c in (*ROW_COLUMNS, *by, *split, *columns)
                                           if c in rows.columns))
            b = b.mutate(**fresh_keys(b))
            classes = {}
            for j, values in narrowed.items():
                f = features[j]
                key, classes[f] = _narrowed(b[f], values, kept[j])
                b = b.mutate(**{f: key, f"sqlcal_class{j}": classes[f]})
            extra = [f"sqlcal_class{j}" for j in narrowed]
            cells = cells_of(b, [*columns, *extra])
            cells = cells.mutate(**{f: _narrowed_value(cells[f], cells[f"sqlcal_class{j}"])
                                    if j in narrowed else recode(f, segment_value(cells[f]))
                                    for j, f in zip(cols, columns)})
            branches += [branch(cells, [*columns, *extra], i, tuples[i]) for i in members]
    out = branches[0] if len(branches) == 1 else ibis.union(*branches, distinct=False)
    if candidates is not None:
        frame = pd.DataFrame([(i, *vals) for i, vals in candidates],
                             columns=["sqlcal_tuple", *(f"sqlcal_k{j}" for j in range(width))])
        table = ibis.memtable(frame)
        out = out.semi_join(table, [out.sqlcal_tuple == table.sqlcal_tuple, *(
            out[n] == table[f"sqlcal_k{j}"] for j, n in enumerate(names))])
    return out


def segment_overlaps(rows: ir.Table, params: tuple, *, weighted: bool) -> ir.Table:
    """On one fold, per score bin (``bin``, when ``bins``), the sums of the rows of each of
    ``nodes`` (``(group key, predicates)``, :func:`segment_condition`'s): ``r{k}`` = Σw(y − p),
    ``i{k}`` = Σwp(1 − p) and, weighted, ``v{k}`` = Σw²p(1 − p), as CASE sums over one scan of
    the rows inside one of ``within`` (the same form; every node lies inside one of them). With
    ``cube`` (the token of a search whose reduced cube :func:`segment_sums` kept), the sums
    come from the cube's rows instead of the table's, whose keys are already recoded."""
    by, (holdout, a_share, split), bins, fold, nodes, within, cube = params
    cells = _STAGES.get(("segment_cube", cube)) if cube else None
    if cells is not None:  # the cube: sums per fold, group, bin and recoded feature keys
        t = cells

        def member(key, preds):
            out = [t[f] == (SEGMENT_OTHER if k == SEGMENT_OTHER else k) for f, k, _ in preds]
            return ibis.and_(*([key_match(t, key, by)] if by else []), *out)

        t = t.mutate(sqlcal_r=t.swy - t.swp, sqlcal_i=t.swp - t.swpp,
                     **({"sqlcal_v": t.var2} if weighted else {}))
    else:
        t = rows.mutate(sqlcal_fold=segment_fold(rows, holdout, a_share, split))
        if bins:
            t = t.mutate(bin=uniform_bin(t.p, bins, "sqlcal"))

        def member(key, preds):
            return key_match(t, key, by) & segment_condition(t, preds) if by else \
                segment_condition(t, preds)

        w = t.w if weighted else ibis.literal(1.0)
        t = t.mutate(sqlcal_r=w * (t.y - t.p), sqlcal_i=w * t.p * (1 - t.p),
                     **({"sqlcal_v": w * w * t.p * (1 - t.p)} if weighted else {}))
    t = t.filter((t.sqlcal_fold == fold) & ibis.or_(*(member(k, p) for k, p in within)))
    zero = number(0.0)
    sums = {}
    for k, (key, preds) in enumerate(nodes):
        m = member(key, preds)
        for name in ("r", "i", "v") if weighted else ("r", "i"):
            sums[f"{name}{k}"] = ibis.ifelse(m, t[f"sqlcal_{name}"], zero).sum()
    return _aggregate(t, ["bin"] if bins else [], **sums)


def _is_blocks(theta) -> bool:
    """Whether a segment's θ is an isotonic map's blocks (four tuples), not a number or pair."""
    return isinstance(theta, tuple) and bool(theta) and isinstance(theta[0], tuple)


def piecewise(p: ir.FloatingValue, lo, hi, value, slope) -> ir.FloatingValue:
    """An isotonic map's blocks as an expression of ``p``: block k holds lo[k] ≤ p < lo[k + 1]
    (the first every p below, the last every p above) and maps p to value[k] up to hi[k], then
    linearly with ``slope[k]`` towards the next block (a balanced tree of comparisons)."""

    def piece(k):
        if slope[k] == 0:
            return number(value[k])
        return ibis.ifelse(p <= number(hi[k]), number(value[k]),
                           number(value[k]) + (p - number(hi[k])) * number(slope[k]))

    def tree(i, j):  # pieces i..j: piece k holds lo[k] <= p < lo[k + 1]
        if i == j:
            return piece(i)
        mid = (i + j + 1) // 2
        return ibis.ifelse(p < number(lo[mid]), tree(i, mid - 1), tree(mid, j))

    return tree(0, len(value) - 1).cast("float64")


def segment_fixed(p: ir.FloatingValue, members: Sequence[ir.BooleanValue], thetas: Sequence,
                  clip: float) -> ir.FloatingValue:
    """The score a segment fix gives a row (``members``: whether it is in each fitted segment;
    ``thetas``: each segment's θ): the one rule both the fix's judgement
    (:func:`segment_terms`) and its exported map (:class:`sqlcal.audit.fixmaps.SegmentFix`) use.

    A row in no fitted segment keeps its score ``p``. In a segment, with p̃ = p clipped to
    [clip, 1 − clip], the score is σ(logit p̃ + Σ_k θ_k·1[row ∈ S_k]) (θ a number: a shift; a
    pair: θ₀ + θ₁·logit p̃, a Platt map), or, when the θ are isotonic maps' blocks (four
    tuples), the first segment's map of p (a decision list; an entry without blocks keeps
    ``p``); that score is clipped to [clip, 1 − clip], so a fix never gives 0 or 1."""
    def clipped(x):
        return ibis.greatest(ibis.least(x, number(1 - clip)), number(clip))

    if any(_is_blocks(theta) for theta in thetas):
        cases = [(m, clipped(piecewise(p, *theta)) if _is_blocks(theta) else p)
                 for m, theta in zip(members, thetas)]
        return ibis.cases(*cases, else_=p).cast("float64") if cases else p
    if not members:
        return p
    pc = clipped(p)
    eta = (pc / (1 - pc)).ln()
    shift = number(0.0)
    for m, theta in zip(members, thetas):
        if isinstance(theta, tuple):  # (intercept, slope on logit p̃): a Platt map
            value = number(theta[0]) + number(theta[1]) * eta
        else:
            value = number(theta)
        shift = shift + ibis.cases((m, value), else_=number(0.0))
    mapped = 1 / (1 + ibis.greatest(ibis.least(-(eta + shift), number(EXP_LIMIT)),
                                    number(-EXP_LIMIT)).exp())
    return ibis.ifelse(ibis.or_(*members), clipped(mapped), p)


def segment_terms(rows: ir.Table, params: tuple, *, weighted: bool,
                  checks: Callable | None = None) -> ir.Table:
    """Per fold, group and membership pattern (Σ 2^k over the segments k holding the row), the
    terms of the logistic fit logit p' = logit p̃ + Σ θ_k·1[row ∈ S_k], p̃ = clip(p):
    a segment's θ may be a pair (intercept, slope): its rows get θ₀ + θ₁·logit p̃ (a
    per-segment Platt map); or four tuples (lo, hi, value, slope), an isotonic map's blocks
    (:func:`piecewise`): then the segments are a decision list, a row belongs to the first
    segment holding it; with ``step`` > 0 also per logit cell ``lcell`` = FLOOR(logit p̃ /
    step) and only ``n``, ``W``, Σwy, Σw·logit p̃ (the fit's histogram); with ``step`` = 0 the
    exact terms at the given θ of the score p' the fix exports (:func:`segment_fixed`):
    ``r`` = Σw(y − p'), ``h`` = Σwp'(1 − p'), ``r0``, ``h0`` (of p itself), the
    log-likelihoods ``ll``, ``ll0`` (a score of 0 or 1, kept only outside the fitted segments,
    read as 10^-15 from it), ``dd`` = Σw(ℓ' − ℓ₀)², the Brier sums ``bs``, ``bs0``. As the first
    scan of a source (a fix of given segments) it carries the validation ``checks`` and the
    score's range ``p_min``, ``p_max``."""
    by, features, (holdout, a_share, split), segments, step, clip = params
    t = rows.mutate(sqlcal_fold=segment_fold(rows, holdout, a_share, split))
    member = [key_match(t, key, by) & segment_condition(t, preds) if by else
              segment_condition(t, preds) for key, preds, _ in segments]
    listed = any(_is_blocks(theta) for _, _, theta in segments)
    if listed:  # a decision list: each row to the first segment holding it
        first, before = [], ibis.literal(False)
        for m in member:
            first.append(m & ~before)
            before = before | m
        member = first
    pattern = ibis.literal(0, type="int64")
    for k, m in enumerate(member):
        pattern = pattern + ibis.cases((m, 2**k), else_=0).cast("int64")
    pc = ibis.greatest(ibis.least(t.p, number(1 - clip)), number(clip))
    eta = (pc / (1 - pc)).ln()
    t = t.mutate(pattern=pattern, sqlcal_eta=eta)
    keys = ["sqlcal_fold", *by, "pattern"]
    valid = ({**checks(t), "p_min": t.p.min(), "p_max": t.p.max()} if checks else {})
    if step:
        t = t.mutate(lcell=(t.sqlcal_eta / number(step)).floor().cast("int64"))
        w = (lambda v: t.w * v) if weighted else (lambda v: v)
        return _aggregate(t, [*keys, "lcell"], n=t.count(),
                          W=t.w.sum() if weighted else t.count().cast("float64"),
                          swy=w(t.y).sum(), sweta=w(t.sqlcal_eta).sum(), **valid)
    # the score the fix exports, judged as it is (its own members: a decision list's entries
    # are first matches by construction)
    own = [key_match(t, key, by) & segment_condition(t, preds) if by else
           segment_condition(t, preds) for key, preds, _ in segments]
    t = t.mutate(sqlcal_mu=segment_fixed(t.p, own, [theta for _, _, theta in segments], clip),
                 sqlcal_pc=t.p)

    def loglik(q):  # 0 or 1 only outside the fitted segments (the score as given)
        floor = number(1e-15)
        return (t.y * ibis.greatest(q, floor).ln()
                + (1 - t.y) * ibis.greatest(1 - q, floor).ln())

    t = t.mutate(sqlcal_ll=loglik(t.sqlcal_mu), sqlcal_ll0=loglik(t.sqlcal_pc))
    d = t.sqlcal_ll - t.sqlcal_ll0
    w = (lambda v: t.w * v) if weighted else (lambda v: v)
    return _aggregate(t, keys, **valid, n=t.count(),
                      W=t.w.sum() if weighted else t.count().cast("float64"), swy=w(t.y).sum(),
                      r=w(t.y - t.sqlcal_mu).sum(), h=w(t.sqlcal_mu * (1 - t.sqlcal_mu)).sum(),
                      r0=w(t.y - t.sqlcal_pc).sum(), h0=w(t.sqlcal_pc * (1 - t.sqlcal_pc)).sum(),
                      ll=w(t.sqlcal_ll).sum(), ll0=w(t.sqlcal_ll0).sum(), dd=w(d * d).sum(),
                      bs=w((t.y - t.sqlcal_mu) ** 2).sum(), bs0=w((t.y - t.sqlcal_pc) ** 2).sum())
