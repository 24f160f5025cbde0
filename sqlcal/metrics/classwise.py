"""Summaries over the classes of a classwise multiclass table.

:func:`classwise` runs a metric once on a ``multiclass(mode="classwise")`` table grouped by
class (one scan: the classes are one more group key of the same GROUP BY) and reduces the
per-class values to their average and the worst class; :func:`sqlcal.debiased_ece` (a binned
metric) through it is uncertainty-calibration's marginal calibration error.

Why a function taking the metric rather than an ``average=`` option on every metric: the
per-class values are the metric's own result (one row per class, with every column it has),
and the average is a pure finish over them; a wrapper gives every binned metric, present and
future, the same class average and worst class without a new option in each signature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from sqlcal.inputs.groupkeys import GroupKeys
from sqlcal.options import OptionError, checked
from sqlcal.query.executor import source

#: result columns that are counts or bookkeeping, never the metric's value
_NOT_VALUES = {"n", "W", "n_bins", "n_dropped", "bins", "classes"}


@checked
def classwise(
    metric: Callable,
    data: Any,
    *,
    score: str = "score",
    label: str = "label",
    weight: str | None = None,
    by: str | Sequence[str] = (),
    value: str | None = None,
    power: float = 1.0,
    metric_options: dict | None = None,
) -> pd.DataFrame:
    r"""A metric per class of a classwise multiclass table, reduced to the class average and
    the worst class, in one call and one scan.

    Parameters
    ----------
    metric : callable
        A sqlcal metric (``sqlcal.ece``, ``sqlcal.debiased_ece``, ``sqlcal.brier``, …).
    data : ibis Table
        A table made by ``sqlcal.multiclass(..., mode="classwise")`` (column ``class``).
    score, label, weight : str
        Its columns (``weight="weight"`` when it was made with ``weight=``).
    by : str or sequence of str, default ()
        Group keys besides the class: one row per group.
    value : str, optional
        The result column averaged (default: the metric's value column, such as ``ece``,
        ``rmsce`` or ``brier``).
    power : float, default 1
        The class average is :math:`(\frac1K \sum_k v_k^{power})^{1/power}`: 1 is the mean
        (netcal's and torchmetrics' averaging of per-class errors); 2 with ``norm="l2"`` or
        :func:`debiased_ece` is uncertainty-calibration's marginal calibration error. Any
        power holds: the mean is scaled by the largest value (a large power tends to the
        worst class instead of underflowing to 0).
    metric_options : dict, optional
        The metric's own options (``{"bins": 10, "norm": "l2"}``), checked by the metric.

    Returns
    -------
    pandas.DataFrame
        One row per group: the keys, ``classes`` (K), ``<value>_average``, ``<value>_max``,
        ``worst_class`` (the class of the largest value; the smallest such class on ties) and
        ``W`` (the weight of the examples, each counted once).

    See Also
    --------
    class_summary : the same reduction of a per-class result you already have.
    multiclass : the table of binary rows, top-label or classwise.
    ece : a metric to pass, per class.

    References
    ----------
    .. [1] M. Kull, M. Perello-Nieto, M. Kängsepp, T. Silva Filho, H. Song and P. Flach, "Beyond
       Temperature Scaling: Obtaining Well-Calibrated Multiclass Probabilities with Dirichlet
       Calibration", NeurIPS, 2019.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> wide = pd.DataFrame({"cat": [0.7, 0.2, 0.6, 0.9], "dog": [0.3, 0.8, 0.4, 0.1],
    ...                      "truth": ["cat", "cat", "dog", "cat"]})
    >>> per_class = sqlcal.multiclass(wide, format="wide", mode="classwise",
    ...                               probs=["cat", "dog"], label="truth")
    >>> out = sqlcal.classwise(sqlcal.ece, per_class, metric_options={"bins": 2})
    >>> out[["classes", "ece_average", "ece_max"]].round(4)
       classes  ece_average  ece_max
    0        2         0.25     0.25
    """
    if not callable(metric):
        raise OptionError(f"metric must be a sqlcal metric (a function such as sqlcal.ece), "
                          f"not {metric!r}")
    if isinstance(power, bool) or not isinstance(power, (int, float)) or not power >= 1:
        raise OptionError(f"power must be a number >= 1 (the class average's power), not "
                          f"{power!r}")
    by = [by] if isinstance(by, str) else list(by)
    if "class" in by:
        raise OptionError("by= lists 'class': classwise() groups by class itself and averages "
                          "over it; list only the other keys")
    src = source(data, score=score, label=label, weight=weight, by=[*by, "class"])
    per_class = src.group_keys.internal(metric(src, **(metric_options or {})))
    # the class's internal column as "class", the other keys' as they are, then their names back
    *keys, cls = src.group_keys.keys
    per_class = per_class.drop(columns=list(cls.columns)).assign(
        **{"class": per_class[cls.column]})
    out = class_summary(per_class, by=[c for k in keys for c in k.columns], value=value,
                        power=power)
    return GroupKeys(tuple(keys)).present(out)


@checked
def class_summary(per_class: pd.DataFrame, *, by: Sequence[str] = (), value: str | None = None,
                  power: float = 1.0) -> pd.DataFrame:
    """The class average and worst class of a metric's per-class result (keys, ``class``, the
    value column); see :func:`classwise`.

    Parameters
    ----------
    per_class : pandas.DataFrame
        A metric's result in classwise mode: the group keys, ``class``, the value column and
        ``W``.
    by : sequence of str, default ()
        The group keys.
    value : str, optional
        The value column (default: the first float column that is not a count or weight).
    power : float, default 1
        The class average is the power mean over the classes, each counting once:
        (mean of |v_k|^power)^(1/power), computed as max|v|·(mean of (|v_k|/max|v|)^power)^(1/power)
        so any power holds (a large one tends to the worst class).

    Returns
    -------
    pandas.DataFrame
        One row per group: ``classes`` (their number), ``<value>_average``, ``<value>_max``,
        ``worst_class`` and, when the metric's result has it, ``W``.

    See Also
    --------
    classwise : runs a metric per class and reduces it in one call.
    multiclass : builds the classwise table a per-class metric reads.

    Examples
    --------
    >>> per_class = pd.DataFrame({"class": ["a", "b", "c"], "ece": [0.1, 0.3, 0.2],
    ...                           "W": [5.0, 5.0, 5.0]})
    >>> class_summary(per_class, power=2).round(4)
       classes  ece_average  ece_max worst_class    W
    0        3        0.216      0.3           b  5.0
    """
    if not isinstance(per_class, pd.DataFrame):
        raise TypeError(f"class_summary takes a metric's per-class result (a DataFrame), not "
                        f"{type(per_class).__name__}")
    by = [by] if isinstance(by, str) else list(by)
    missing = [c for c in (*by, "class") if c not in per_class.columns]
    if missing:
        raise OptionError(f"class_summary: the per-class result lacks the columns {missing}; "
                          f"it has {list(per_class.columns)}")
    if value is None:
        candidates = [c for c in per_class.columns
                      if c not in {*by, "class", *_NOT_VALUES}
                      and pd.api.types.is_float_dtype(per_class[c])]
        if not candidates:
            raise OptionError("value=: the metric's result has no value column to average")
        value = candidates[0]
    elif value not in per_class.columns:
        raise OptionError(f"value={value!r} is not a column of the metric's result "
                          f"{list(per_class.columns)}")

    def reduce(part: pd.DataFrame) -> dict:
        part = part.sort_values("class", kind="stable")
        v = part[value].to_numpy(float)
        worst = int(np.nanargmax(v)) if np.isfinite(v).any() else 0
        return {"classes": len(part),
                f"{value}_average": power_mean(v, power),
                f"{value}_max": float(np.nanmax(v)) if np.isfinite(v).any() else np.nan,
                "worst_class": part["class"].iloc[worst],
                **({"W": float(part["W"].max())} if "W" in part else {})}

    if not by:
        return pd.DataFrame([reduce(per_class)])
    rows = [{**dict(zip(by, key if isinstance(key, tuple) else (key,))), **reduce(part)}
            for key, part in per_class.groupby(by, sort=True, dropna=False)]
    return GroupKeys.plain(by).present(pd.DataFrame(rows))


def power_mean(values: np.ndarray, power: float) -> float:
    """(mean of |v|^power)^(1/power), scaled by the largest |v| first: the terms (|v|/max)^power
    lie in [0, 1] and their mean in [1/K, 1], so neither overflows nor underflows to 0 (the
    plain form gives 0 for values 0.1..0.3 at power 200: 0.3^200 underflows). NaN when a value
    is NaN; inf when one is infinite.

    Examples
    --------
    >>> round(power_mean(np.array([0.1, 0.3, 0.2]), 2), 4)
    0.216
    >>> round(power_mean(np.array([0.1, 0.3, 0.2]), 200), 4)
    0.2984
    """
    a = np.abs(np.asarray(values, dtype=float))
    if not len(a) or np.isnan(a).any():
        return float("nan")
    top = float(a.max())
    if top == 0 or not np.isfinite(top):
        return top
    return top * float(np.mean((a / top) ** power)) ** (1 / power)
