"""Multiclass predictions as warehouses store them, turned into binary calibration problems.

- **long** format: one row per (example, class) with the class's probability and a 0/1 label
  saying whether it is the example's true class;
- **wide** format: one row per example, one probability column per class, and a column holding
  the true class (a string naming its column, or any value mapped to a column by ``classes=``).

``mode="top_label"`` gives one row per example: the top probability as the score and whether
the top class is the true one as the label (the "confidence" calibration of Guo et al.).
``mode="classwise"`` gives one row per example and class, with the class as a group key: every
metric on it must be given ``by="class"`` (one row per class), or be run on ``table.drop("class")``
to pool every class's rows on purpose. The result is an Ibis table: every sqlcal metric takes it
with ``score="score", label="label"`` (and ``weight="weight"`` when made with ``weight=``).

Before anything is returned, one aggregate query in the engine checks every example: the
probabilities are numbers in [0, 1] summing to 1 (within ``tolerance``), the true class names one
probability column (wide) or exactly one row (long), and no example id repeats. A problem is an
error naming the column, the problem and the number of examples.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import partial
from typing import Any, Sequence

import ibis
import ibis.expr.types as ir
import numpy as np

from sqlcal import summaries
from sqlcal.options import checked
from sqlcal.source import USE_CHECKS, InvalidInputError, register_use_check, resolve_table

MODES = ("top_label", "classwise")
FORMATS = ("long", "wide")
#: the largest |Σₖ pₖ − 1| accepted per example by default (float32 softmax outputs stay within
#: about 3e-7 of 1 up to 10^4 classes; probabilities rounded for storage do not)
TOLERANCE = 1e-6
#: the columns multiclass() adds next to the keys
OUTPUTS = ("class", "score", "label", "weight")
_LARGEST = float(np.finfo(np.float64).max)


@checked
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
    classes: Sequence[Any] | Mapping[Any, str] | None = None,
    weight: str | None = None,
    keys: str | Sequence[str] = (),
    table: str | None = None,
    on_invalid: str = "raise",
    tolerance: float = TOLERANCE,
) -> ir.Table:
    """Turn multiclass predictions into a table of binary (score, label) rows.

    Parameters
    ----------
    data : ibis Table, path, URL or DataFrame
        The predictions, read as :func:`sqlcal.source` reads its ``data``.
    format : {"long", "wide"}, default "long"
        Long: ``example``, ``cls``, ``prob`` and ``label`` (1 on the true class's row, else 0).
        Wide: ``probs`` (one column per class) and ``label`` (the true class).
    mode : {"top_label", "classwise"}, default "top_label"
        Top-label: one row per example, the top probability and whether its class is the true
        one. Classwise: one row per example and class, measured with ``by="class"``.
    example, cls, prob : str, optional
        Long format (required there): the example id, the class and the class's probability
        columns. An example is identified by ``(keys…, example)``.
    label : str
        Long format: 0/1 (or boolean), 1 on the true class's row. Wide format: the true class:
        a string naming a column of ``probs``, an integer when the columns are named by its
        digits ("0", "1", …), or any value listed in ``classes``.
    probs : sequence of str, optional
        Wide format (required there): the probability columns, one per class, in class order.
    classes : sequence or mapping, optional
        Wide format: the value of ``label`` for each column of ``probs``, either a list in the
        order of ``probs`` (``classes=[0, 1, 2]``) or a mapping from value to column
        (``classes={0: "p_cat", 1: "p_dog"}``). Needed when the labels are not the column names.
    weight : str, optional
        Column of non-negative example weights (in the long format, equal on every row of an
        example), carried into the result as ``weight``: pass ``weight="weight"`` to the metric.
        Whole numbers count as repeated examples, as everywhere in sqlcal.
    keys : str or sequence of str, default ()
        Columns carried along (model version, segment, day) for ``by=``. In the long format they
        also tell examples apart: rows of the same ``example`` id under different keys are
        different examples.
    table : str, optional
        Table name inside a database given by path or URL, as for :func:`sqlcal.source`.
    on_invalid : {"raise", "drop"}, default "raise"
        An example with a NULL, NaN or out-of-range probability, a NULL (long: non-0/1) label, a
        NULL class or an invalid weight is an error (``"raise"``) or is left out with a warning
        counting it (``"drop"``). Problems of the layout itself (true classes matching no
        column, examples with no or several true-class rows, repeated ids, sums other than 1)
        are always errors: they mean the columns were named wrongly.
    tolerance : float, default 1e-6
        The largest ``abs(sum of an example's probabilities - 1)`` accepted.

    Returns
    -------
    ibis Table
        Columns ``keys…``, ``class`` (classwise mode: the class, as in ``cls`` or ``label``),
        ``score`` (DOUBLE), ``label`` (0/1) and, with ``weight=``, ``weight`` (DOUBLE).

    Raises
    ------
    InvalidInputError
        An example or a column that cannot be measured as given; the message names the column,
        the problem and the number of examples.
    ValueError
        An option that cannot be used (``mode``, ``format``, ``classes``, ``tolerance``).

    Notes
    -----
    Top-label: the score of example :math:`i` is :math:`\\max_k p_{ik}` and its label is
    :math:`1[\\hat k_i = y_i]`. When several classes share the top probability :math:`\\hat k_i`
    is the first of them: the first column of ``probs`` (wide), the smallest class value in the
    engine's ordering (long; for strings its collation: byte order in DuckDB, Spark and a
    C-collated PostgreSQL). The score does not depend on this rule; the label does.
    Top-label calibration is that of Guo, Pleiss, Sun & Weinberger (2017), On Calibration of
    Modern Neural Networks (confidence calibration) and Gupta & Ramdas (2022), Top-label
    calibration and multiclass-to-binary reductions; classwise calibration that of Kull,
    Perello-Nieto, Kängsepp, Silva Filho, Song & Flach (2019), Beyond temperature scaling.

    The checks run as one aggregate query in the engine (examples are counted, never fetched;
    a second query, only when something is wrong, counts each problem to name it). A table not
    bound to an engine (``ibis.table(schema)``, for SQL export) is not checked. In the long
    format an example may leave out classes (rows of probability 0); a class repeated within an
    example is found whenever it changes the example's row count, true rows or sum.
    A table made in classwise mode refuses a metric without ``by="class"``, and one made with
    ``weight=`` a metric without ``weight="weight"`` (:func:`check_use`, which
    :func:`sqlcal.source` calls for every metric).

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> wide = pd.DataFrame({"cat": [0.7, 0.2, 0.6], "dog": [0.3, 0.8, 0.4],
    ...                      "truth": ["cat", "cat", "dog"]})
    >>> top = sqlcal.multiclass(wide, format="wide", probs=["cat", "dog"], label="truth")
    >>> top.execute()
       score  label
    0    0.7      1
    1    0.8      0
    2    0.6      0
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if format not in FORMATS:
        raise ValueError(f"format must be 'long' or 'wide', not {format!r}")
    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', not {on_invalid!r}")
    if (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
            or not tolerance >= 0):
        raise ValueError(f"tolerance must be a number >= 0 (the largest |sum of an example's "
                         f"probabilities - 1| accepted), not {tolerance!r}")
    t = resolve_table(data, table)
    keys = [keys] if isinstance(keys, str) else list(keys)
    options = dict(mode=mode, label=label, weight=weight, keys=keys, tolerance=tolerance,
                   on_invalid=on_invalid)
    if format == "long":
        missing = [n for n, v in (("example", example), ("cls", cls), ("prob", prob)) if v is None]
        if missing:
            raise TypeError(f"the long format needs {missing}")
        if probs is not None or classes is not None:
            raise TypeError("probs= and classes= belong to the wide format; the long format "
                            "names its class column with cls=")
        _check_columns(t, [("example", example), ("class", cls), ("probability", prob),
                           ("label", label)], weight, keys)
        result = _long(t, example=example, cls=cls, prob=prob, **options)
    else:
        if not probs or isinstance(probs, str):
            raise TypeError("the wide format needs probs=[one column per class]")
        probs = [str(c) for c in probs]
        if len(set(probs)) != len(probs):
            raise ValueError(f"probs= names a column more than once: {probs}")
        _check_columns(t, [*(("probability", c) for c in probs), ("label", label)], weight, keys)
        result = _wide(t, probs=probs, classes=classes, **options)
    register_use_check(result, partial(_check_made_use, mode == "classwise", weight is not None))
    return result


def check_use(table: ir.Table, by: Sequence[str], weight: str | None) -> None:
    """Refuse to measure a :func:`multiclass` table in a way it was not made for.

    A classwise table measured without ``"class"`` in ``by`` would pool every class's rows, and
    a table made with ``weight=`` measured without ``weight="weight"`` would count every example
    once. Both are errors; pooling or ignoring the weights on purpose is said by dropping the
    column (``table.drop("class")``, ``table.drop("weight")``). Any other table passes.

    Parameters
    ----------
    table : ibis Table
        The table a metric is about to measure.
    by : sequence of str
        The metric's group keys.
    weight : str or None
        The metric's weight column.
    """
    check = USE_CHECKS.get(table.op())
    if check is not None:
        check(tuple(by), weight)


def _check_made_use(classwise: bool, weighted: bool, by: Sequence[str],
                    weight: str | None) -> None:
    problems = []
    if classwise and "class" not in by:
        problems.append(
            "this multiclass(mode='classwise') table has one row per example and class: pass "
            "by='class' (with any keys) for one result per class, or measure "
            "table.drop('class') to pool every class's rows on purpose")
    if weighted and weight != "weight":
        problems.append(
            "this multiclass(weight=...) table carries its example weights in column 'weight': "
            "pass weight='weight', or measure table.drop('weight') to count every example once")
    if problems:
        raise InvalidInputError("; ".join(problems))


def _wide(t: ir.Table, *, mode, probs, classes, label, weight, keys, tolerance,
          on_invalid) -> ir.Table:
    values = _class_values(t, probs, label, classes)
    label_type = t[label].type()

    def columns(t):
        return ([t[c].cast("float64") for c in probs], t[label],
                t[weight].cast("float64") if weight else None)

    def value_checks(t):
        p, y, w = columns(t)
        checks = [(f"probability column {c!r} is NULL, NaN or outside [0, 1]", _bad_prob(pk))
                  for c, pk in zip(probs, p)]
        checks.append((f"label column {label!r} is NULL", y.isnull()))
        if weight:
            checks.append((f"weight column {weight!r} is NULL, NaN, negative or infinite",
                           _bad_weight(w)))
        return checks

    if _bound(t) and not _wide_clean(t, *columns(t), values, tolerance):
        # something is wrong: a second query counts each problem to name it
        p, y, w = columns(t)
        checks = value_checks(t)
        good = ~_any(e for _, e in checks)
        unmatched = good & ~y.isin(values)
        total = sum(p[1:], p[0])
        off = good & ~unmatched & ((total - 1).abs() > tolerance)
        counts = summaries.execute(t.aggregate(
            n=t.count(), bad=t.count(where=~good), unmatched=t.count(where=unmatched),
            unmatched_values=y.nunique(where=unmatched), off=t.count(where=off),
            off_max=total.max(where=off), off_min=total.min(where=off),
            **{f"v{i}": t.count(where=e) for i, (_, e) in enumerate(checks)})).iloc[0]
        layout = []
        if counts.unmatched:
            # a second, small query only to name the values in the message
            seen = summaries.execute(
                t.filter(unmatched).group_by(label).aggregate(n_=lambda s: s.count())
                .order_by([ibis.desc("n_"), label]).limit(5))
            listed = ", ".join(f"{v!r} ({n} examples)"
                               for v, n in zip(seen[label].tolist(), seen.n_.tolist()))
            more = int(counts.unmatched_values) - len(seen)
            layout.append(
                f"label column {label!r} has {int(counts.unmatched)} examples whose true class "
                f"matches no probability column: {listed}"
                + (f" and {more} more values" if more > 0 else "")
                + f". The columns {probs} stand for the classes {values}: list every class's "
                "column in probs=, and pass classes=[the label value of each column, in probs "
                "order] or classes={value: column} when the labels are not the column names")
        if counts.off:
            layout.append(_sum_problem(int(counts.off), float(counts.off_min),
                                       float(counts.off_max), f"columns {probs}", tolerance))
        drop = _judge(counts, [text for text, _ in checks], layout, on_invalid)
        if drop:
            t = t.filter(~_any(e for _, e in value_checks(t)))

    p, y, w = columns(t)
    carried = {"weight": w} if weight else {}
    if mode == "classwise":
        return ibis.union(*[
            t.select(*keys, **{"class": ibis.literal(v, type=label_type)}, score=pk,
                     label=ibis.ifelse(y == ibis.literal(v, type=label_type), 1, 0), **carried)
            for pk, v in zip(p, values)])
    top = ibis.greatest(*p)
    # the first column reaching the top probability is the predicted class
    correct = ibis.cases(*[(pk == top, ibis.ifelse(y == ibis.literal(v, type=label_type), 1, 0))
                           for pk, v in zip(p, values)])
    return t.select(*keys, score=top, label=correct, **carried)


def _long(t: ir.Table, *, mode, example, cls, prob, label, weight, keys, tolerance,
          on_invalid) -> ir.Table:
    ex = [*keys, example]

    def columns(t):
        return (t[prob].cast("float64"), _binary(t[label]),
                t[weight].cast("float64") if weight else None)

    def value_checks(t):
        p, y, w = columns(t)
        checks = [(f"probability column {prob!r} is NULL, NaN or outside [0, 1]", _bad_prob(p)),
                  (f"label column {label!r} is NULL or not 0/1",
                   y.isnull() | ((y != 0) & (y != 1)).fill_null(True)),
                  (f"class column {cls!r} is NULL", t[cls].isnull())]
        if weight:
            checks.append((f"weight column {weight!r} is NULL, NaN, negative or infinite",
                           _bad_weight(w)))
        return checks

    if _bound(t) and not _long_clean(t, ex, cls, *columns(t), value_checks(t), tolerance):
        # something is wrong: a second query counts each problem to name it
        p, y, w = columns(t)
        checks = value_checks(t)
        per = t.group_by(ex).aggregate(
            n_rows=t.count(), n_classes=t[cls].nunique(), n_true=t.count(where=y == 1),
            total=p.sum(), **({"w_min": w.min(), "w_max": w.max()} if weight else {}),
            **{f"v{i}": t.count(where=e) for i, (_, e) in enumerate(checks)})
        good = ~_any(per[f"v{i}"] > 0 for i in range(len(checks)))
        repeated = good & (per.n_rows > per.n_classes)
        single = good & ~repeated
        off = single & ((per.total - 1).abs() > tolerance)
        counts = summaries.execute(per.aggregate(
            n=per.count(), bad=per.count(where=~good), repeated=per.count(where=repeated),
            no_true=per.count(where=single & (per.n_true == 0)),
            several=per.count(where=single & (per.n_true > 1)),
            off=per.count(where=off), off_max=per.total.max(where=off),
            off_min=per.total.min(where=off),
            **({"varies": per.count(where=good & (per.w_max > per.w_min))} if weight else {}),
            **{f"v{i}": per.count(where=per[f"v{i}"] > 0) for i in range(len(checks))}
        )).iloc[0]
        example_id = f"{example!r}" + (f" within keys {keys}" if keys else "")
        layout = []
        if counts.repeated:
            layout.append(
                f"{int(counts.repeated)} examples (by {example_id}) have more than one row for "
                f"the same class in column {cls!r}: example ids repeat, as when several models "
                "score the same examples; pass keys=[the column(s) telling them apart, such as "
                "the model] or remove the duplicate rows")
        if counts.no_true:
            layout.append(
                f"{int(counts.no_true)} examples (by {example_id}) have no row with label "
                f"{label!r} = 1: each example needs exactly one true-class row (is its true "
                "class missing from the class rows?)")
        if counts.several:
            layout.append(
                f"{int(counts.several)} examples (by {example_id}) have several rows with label "
                f"{label!r} = 1: each example needs exactly one true-class row")
        if counts.off:
            layout.append(_sum_problem(int(counts.off), float(counts.off_min),
                                       float(counts.off_max), f"column {prob!r}", tolerance))
        if weight and counts.varies:
            layout.append(
                f"weight column {weight!r} differs between the rows of {int(counts.varies)} "
                "examples: an example has one weight, repeated on each of its rows")
        drop = _judge(counts, [text for text, _ in checks], layout, on_invalid)
        if drop:
            bad = ibis.ifelse(_any(e for _, e in value_checks(t)), 1, 0)
            t = t.mutate(sqlcal_bad_=bad.max().over(ibis.window(group_by=ex)))
            t = t.filter(t.sqlcal_bad_ == 0).drop("sqlcal_bad_")

    p, y, w = columns(t)
    carried = {"weight": w} if weight else {}
    if mode == "classwise":
        return t.select(*keys, **{"class": t[cls]}, score=p, label=y, **carried)
    # the top class of each example: a window partitioned by example (never over all rows);
    # ties go to the smallest class value
    rank = ibis.row_number().over(ibis.window(group_by=ex, order_by=[p.desc(), t[cls].asc()]))
    ranked = t.mutate(sqlcal_rank_=rank)
    top = ranked.filter(ranked.sqlcal_rank_ == 0)
    p, y, w = columns(top)
    return top.select(*keys, score=p, label=y, **({"weight": w} if weight else {}))


def _wide_clean(t: ir.Table, p: list, y: ir.Value, w: ir.Value | None, values: list,
                tolerance: float) -> bool:
    """One cheap aggregate proving every example valid: counts for NULLs, MIN/MAX for ranges
    (NaN sorts above every number in DuckDB, Postgres and Spark, so MAX is NaN when any value
    is), the extreme sums, and the labels outside the classes."""
    total = sum(p[1:], p[0])
    columns = [*p, *([w] if w is not None else [])]
    quick = summaries.execute(t.aggregate(
        n=t.count(), y_n=y.count(), unmatched=t.count(where=~y.isin(values)),
        s_lo=total.min(), s_hi=total.max(),
        **{f"{name}{i}": agg for i, c in enumerate(columns)
           for name, agg in (("n", c.count()), ("lo", c.min()), ("hi", c.max()))})).iloc[0]
    n = int(quick.n)
    highs = [1.0] * len(p) + [_LARGEST] * (w is not None)
    return (n > 0 and int(quick.y_n) == n and int(quick.unmatched) == 0
            and all(int(quick[f"n{i}"]) == n and float(quick[f"lo{i}"]) >= 0
                    and float(quick[f"hi{i}"]) <= high for i, high in enumerate(highs))
            and abs(float(quick.s_lo) - 1) <= tolerance and abs(float(quick.s_hi) - 1) <= tolerance)


def _long_clean(t: ir.Table, ex: list[str], cls: str, p: ir.Value, y: ir.Value,
                w: ir.Value | None, checks: list, tolerance: float) -> bool:
    """One cheap query proving every example valid: per example its rows, true rows, sum and
    invalid values (no per-example distinct count: every example has one row per class of the
    table, or the counting query looks for repeated classes)."""
    per = t.group_by(ex).aggregate(
        n_rows=t.count(), n_true=t.count(where=y == 1), total=p.sum(),
        bad=t.count(where=_any(e for _, e in checks)),
        **({"w_min": w.min(), "w_max": w.max()} if w is not None else {}))
    quick = per.aggregate(
        n=per.count(), bad=per.count(where=per.bad > 0), rows_lo=per.n_rows.min(),
        rows_hi=per.n_rows.max(), not_one=per.count(where=per.n_true != 1),
        s_lo=per.total.min(), s_hi=per.total.max(),
        varies=per.count(where=per.w_max > per.w_min) if w is not None else ibis.literal(0))
    quick = summaries.execute(quick.cross_join(t.aggregate(k=t[cls].nunique()))).iloc[0]
    k = int(quick.k)
    return (int(quick.n) > 0 and int(quick.bad) == 0 and int(quick.not_one) == 0
            and int(quick.varies) == 0 and int(quick.rows_lo) == k and int(quick.rows_hi) == k
            and abs(float(quick.s_lo) - 1) <= tolerance and abs(float(quick.s_hi) - 1) <= tolerance)


def _judge(counts, checks: list[str], layout: list[str], on_invalid: str) -> bool:
    """Raise for any problem, or (``on_invalid="drop"``) warn for invalid values and say whether
    to drop them. Layout problems are always errors."""
    n, bad = int(counts.n), int(counts.bad)
    values = [f"{text} in {int(counts[f'v{i}'])} examples" for i, text in enumerate(checks)
              if counts[f"v{i}"]]
    if on_invalid == "raise" and values:
        raise InvalidInputError(
            "; ".join(values + layout)
            + ". Clean them, or pass on_invalid='drop' to leave out and count the examples "
            "with invalid values")
    if layout:
        raise InvalidInputError("; ".join(layout) + (
            f" (counted among the {n - bad} examples with valid values)" if bad else ""))
    if not bad:
        return False
    if bad == n:
        raise InvalidInputError(f"every one of the {n} examples is invalid: " + "; ".join(values))
    warnings.warn(f"sqlcal.multiclass dropped {bad} of {n} examples: " + "; ".join(values),
                  stacklevel=4)
    return True


def _sum_problem(count: int, low: float, high: float, where: str, tolerance: float) -> str:
    worst = low if abs(low - 1) >= abs(high - 1) else high
    return (f"{count} examples have probabilities ({where}) summing to other than 1 by more "
            f"than tolerance={tolerance:g} (the worst sums to {worst!r}): list every class's "
            "probability, renormalise them, or pass a larger tolerance=")


def _class_values(t: ir.Table, probs: list[str], label: str, classes) -> list:
    """The value of the label column that stands for each probability column, in probs order."""
    label_type = t[label].type()
    hint = ("pass classes=[the label value of each column, in probs order] or "
            "classes={value: column}")
    if classes is None:
        if label_type.is_string():
            return list(probs)
        if label_type.is_integer():
            if all(c.lstrip("-").isdigit() and str(int(c)) == c for c in probs):
                return [int(c) for c in probs]
            raise InvalidInputError(
                f"label column {label!r} holds {label_type} class labels, which cannot name the "
                f"probability columns {probs}: {hint}")
        raise InvalidInputError(
            f"label column {label!r} has type {label_type}: the wide format reads it as the "
            f"true class, a string naming a column of probs= or a value listed in classes=; "
            f"{hint}")
    if isinstance(classes, Mapping):
        columns = list(classes.values())
        missing = [c for c in probs if c not in columns]
        unknown = [c for c in columns if c not in probs]
        if missing or unknown or len(columns) != len(probs):
            raise ValueError(
                f"classes= must map one label value to each column of probs={probs}"
                + (f"; no value for {missing}" if missing else "")
                + (f"; {unknown} are not in probs" if unknown else "")
                + ("; a column has several values" if not (missing or unknown) else ""))
        value_of = {c: v for v, c in classes.items()}
        values = [value_of[c] for c in probs]
    else:
        if isinstance(classes, str):
            raise ValueError(f"classes= must be a list or a mapping, not the string {classes!r}")
        values = list(classes)
        if len(values) != len(probs):
            raise ValueError(f"classes= lists {len(values)} values for the {len(probs)} columns "
                             f"of probs={probs}: give one label value per column, in order")
    values = [v.item() if isinstance(v, np.generic) else v for v in values]
    if len(set(values)) != len(values):
        raise ValueError(f"classes= gives the same label value to several columns: {values}")
    for v in values:
        try:
            literal = ibis.literal(v)
            ok = not isinstance(v, bool) or label_type.is_boolean()
            t[label] == literal  # noqa: B015 (raises when the types cannot be compared)
        except Exception:
            ok = False
        if not ok:
            raise ValueError(f"classes= value {v!r} cannot be compared with label column "
                             f"{label!r} of type {label_type}")
    return values


def _check_columns(t: ir.Table, roles: list[tuple[str, str]], weight: str | None,
                   keys: list[str]) -> None:
    schema = t.schema()
    roles = [*roles, *([("weight", weight)] if weight else []), *(("key", k) for k in keys)]
    for role, col in roles:
        if col not in schema:
            raise InvalidInputError(f"{role} column {col!r} is not in the table; its columns are "
                                    f"{list(schema.names)}")
        dtype = schema[col]
        if role in ("probability", "weight") and not dtype.is_numeric():
            raise InvalidInputError(f"{role} column {col!r} has type {dtype}; expected a number")
    clash = sorted(set(keys) & set(OUTPUTS))
    if clash:
        raise InvalidInputError(f"keys {clash} clash with the columns multiclass() writes "
                                f"{OUTPUTS}; rename them in the table or with a view")


def _bound(t: ir.Table) -> bool:
    """Whether the table can be queried (an unbound ibis.table(schema) is for SQL export)."""
    try:
        t._find_backend(use_default=True)
    except ibis.common.exceptions.IbisError:
        return False
    return True


def _binary(col: ir.Value) -> ir.NumericValue:
    if col.type().is_boolean():
        return ibis.cases((col, 1), (~col, 0))  # NULL stays NULL
    if not col.type().is_numeric():
        raise InvalidInputError(f"label column {col.get_name()!r} has type {col.type()}; the long "
                                "format wants 0/1 or a boolean (1 on the true class's row)")
    return col


def _bad_prob(p: ir.FloatingValue) -> ir.BooleanValue:
    # NULL or NaN, or outside [0, 1]; never NULL itself, so it can be counted and negated
    return p.isnull() | (p.isnan() | (p < 0) | (p > 1)).fill_null(True)


def _bad_weight(w: ir.FloatingValue) -> ir.BooleanValue:
    return w.isnull() | (w.isnan() | (w < 0) | (w > _LARGEST)).fill_null(True)


def _any(conditions) -> ir.BooleanValue:
    result = ibis.literal(False)
    for c in conditions:
        result = result | c
    return result
