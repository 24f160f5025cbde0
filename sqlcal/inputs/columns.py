"""The normalised rows' own columns and the exact literals every query writes: what
:func:`sqlcal.inputs.sources.describe` adds to the user's columns, and what the reductions read."""

from __future__ import annotations

import ibis
import ibis.expr.types as ir

#: the column of a downsampled source's rows holding each row's sampling rate: the rate a kept
#: negative was kept at, 1 for a positive (every positive is kept)
RATE = "r_"
#: the column of the training rate when it is read from the table (validation only: the scores
#: are corrected when the rows are made)
TRAINING_RATE = "t_"
#: the column of a paired comparison's second score (sqlcal.compare): the baseline model's score
#: of the same row, validated like the score
BASELINE = "q_"
#: the columns a summary reads from the normalised rows, beside the group keys
ROW_COLUMNS = ("p", "y", "w", RATE, BASELINE)
#: the largest weight accepted: its square, summed over 2^53 rows and times a squared log-loss
#: term (at most about 745^2), stays inside a double, so no variance sum can overflow
WEIGHT_MAX = 1e140


def number(x: float) -> ir.FloatingValue:
    """A double literal every engine reads back bit for bit: the shortest round-trip decimal as a
    string, cast. (DuckDB 1.5 reads a 17-digit decimal literal as DECIMAL and rounds its
    conversion to DOUBLE off by an ulp about one time in nine: a score equal to a bin edge or a
    block's end would then fall on the wrong side.)"""
    return ibis.literal(repr(float(x))).cast("float64")


def fractional_part(x: ir.FloatingValue) -> ir.FloatingValue:
    """The distance from |x| to the nearest whole number: 0 exactly when x is whole (and for an
    x that is infinite, NaN or NULL), in (0, 0.5] otherwise.

    Pure double arithmetic, no FLOOR: for 0 ≤ a < 2^52, (a + 2^52) − 2^52 rounds a to a whole
    number (doubles in [2^52, 2^53) are the whole numbers), exactly in IEEE round-to-nearest, as
    DuckDB, PostgreSQL and Spark compute; every |x| ≥ 2^52 is whole. (Ibis's FLOOR casts to
    BIGINT, which needed a clamp to ±2^52 on both sides of each row: that cost a quarter of the
    weighted ECE query's CPU.)
    """
    a = x.abs()
    c = number(2.0**52)
    return (a < c).ifelse((a - ((a + c) - c)).abs(), number(0.0))
