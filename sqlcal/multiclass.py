"""Multiclass predictions as warehouses store them, turned into binary calibration problems.

- **long** format: one row per (example, class) with the class's probability and a 0/1 label
  saying whether it is the example's true class;
- **wide** format: one row per example, one probability column per class, and a column holding
  the true class.

``mode="top_label"`` gives one row per example: the top probability as the score and whether
the top class is the true one as the label (the "confidence" calibration of Guo et al.).
``mode="classwise"`` gives one row per example and class, with the class as a group key, so every
metric returns one row per class (pass ``by="class"``). The result is an Ibis table: every sqlcal
metric takes it with ``score="score", label="label"``; nothing is computed until a metric runs.
"""

from __future__ import annotations

from typing import Any, Sequence

import ibis
import ibis.expr.types as ir

from sqlcal.source import _resolve_table

MODES = ("top_label", "classwise")


def multiclass(
    data: Any,
    *,
    format: str = "long",
    mode: str = "top_label",
    example: str | None = None,
    cls: str | None = None,
    prob: str | None = None,
    label: str,
    probs: Sequence[str] | None = None,
    keys: Sequence[str] = (),
    table: str | None = None,
) -> ir.Table:
    """Turn multiclass predictions into a table of binary (score, label) rows.

    Parameters
    ----------
    data : as for :func:`sqlcal.source`
    format : {"long", "wide"}
        Long: ``example``, ``cls``, ``prob`` and ``label`` (1 on the true class's row, else 0).
        Wide: ``probs`` (one column per class; the column name is the class) and ``label`` (the
        true class, as the column name).
    mode : {"top_label", "classwise"}
    keys : sequence of str
        Columns carried along (model version, segment, day) for ``by=``.

    Returns
    -------
    ibis Table
        Columns ``keys…``, (``class`` for classwise), ``score``, ``label``. Ties for the top
        probability go to the first class (lowest class value in long format, the first column in
        wide format).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    t = _resolve_table(data, table)
    keys = list(keys)
    if format == "long":
        missing = [n for n, v in (("example", example), ("cls", cls), ("prob", prob)) if v is None]
        if missing:
            raise TypeError(f"the long format needs {missing}")
        if mode == "classwise":
            return t.select(*keys, **{"class": t[cls]}, score=t[prob].cast("float64"),
                            label=t[label])
        # the top class of each example: a window partitioned by example (never over all rows)
        rank = ibis.row_number().over(ibis.window(group_by=[*keys, example],
                                                  order_by=[t[prob].desc(), t[cls]]))
        ranked = t.mutate(rank_=rank)
        top = ranked.filter(ranked.rank_ == 0)
        return top.select(*keys, score=top[prob].cast("float64"), label=top[label])
    if format != "wide":
        raise ValueError(f"format must be 'long' or 'wide', not {format!r}")
    if not probs:
        raise TypeError("the wide format needs probs=[one column per class]")
    if mode == "classwise":
        parts = [t.select(*keys, **{"class": ibis.literal(c)}, score=t[c].cast("float64"),
                          label=ibis.ifelse(t[label] == c, 1, 0)) for c in probs]
        return ibis.union(*parts)
    top = ibis.greatest(*[t[c].cast("float64") for c in probs])
    # the first column reaching the top probability is the predicted class
    predicted = ibis.cases(*[(t[c].cast("float64") == top, c) for c in probs])
    return t.select(*keys, score=top, label=ibis.ifelse(predicted == t[label], 1, 0))
