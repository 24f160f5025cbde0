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
probabilities are numbers in [0, 1] summing to 1 (within ``sum_tolerance``), the true class names
one probability column (wide) or exactly one row (long), and no example id repeats. A problem is an
error naming the column, the problem and the number of examples.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from sqlcal.inputs.sources import (
    USE_CHECKS,
    InvalidInputError,
    Source,
    apply_where,
    register_use_check,
    resolve_table,
)
from sqlcal.options import OPTIONS, OptionError, checked, option
from sqlcal.query import declared, planner, reductions

if TYPE_CHECKING:
    import ibis.expr.types as ir

MODES = option("multiclass", "mode").choices
FORMATS = OPTIONS["format"].choices
#: the largest |Σₖ pₖ − 1| accepted per example by default (float32 softmax outputs stay within
#: about 3e-7 of 1 up to 10^4 classes; probabilities rounded for storage do not)
SUM_TOLERANCE = 1e-6
#: the columns multiclass() adds next to the keys
OUTPUTS = ("class", "predicted_class", "score", "label", "weight")
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
    logits: Sequence[str] | None = None,
    logit: str | None = None,
    classes: Sequence[Any] | Mapping[Any, str] | None = None,
    weight: str | None = None,
    keys: str | Sequence[str] = (),
    table: str | None = None,
    on_invalid: str = "raise",
    sum_tolerance: float = SUM_TOLERANCE,
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
        Wide format: the probability columns, one per class, in class order.
    logits : sequence of str, optional
        Wide format, instead of ``probs``: the logit columns, one per class; the probabilities
        are their softmax, computed in the engine after subtracting each example's largest
        logit (so no exponent overflows).
    logit : str, optional
        Long format, instead of ``prob``: the class's logit; the probabilities are the softmax
        over the example's rows, computed in the engine as for ``logits``.
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
    sum_tolerance : float, default 1e-6
        The largest ``abs(sum of an example's probabilities - 1)`` accepted.

    Returns
    -------
    ibis Table
        Columns ``keys…``, ``class`` (classwise mode: the class, as in ``cls`` or ``label``),
        ``predicted_class`` (top-label mode: the class holding the top probability, for
        ``by="predicted_class"``),
        ``score`` (DOUBLE), ``label`` (0/1) and, with ``weight=``, ``weight`` (DOUBLE).

    Raises
    ------
    InvalidInputError
        An example or a column that cannot be measured as given; the message names the column,
        the problem and the number of examples.
    ValueError
        An option that cannot be used (``mode``, ``format``, ``classes``, ``sum_tolerance``).

    See Also
    --------
    classwise : a metric per class of a classwise table, reduced.
    temperature_scaling : recalibrates the multiclass predictions.
    source : the same checks for binary predictions.

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

    References
    ----------
    .. [1] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of Modern Neural
       Networks", ICML (PMLR 70), 2017.
    .. [2] C. Gupta and A. Ramdas, "Top-Label Calibration and Multiclass-to-Binary Reductions",
       ICLR, 2022.
    .. [3] M. Kull, M. Perello-Nieto, M. Kängsepp, T. Silva Filho, H. Song and P. Flach, "Beyond
       Temperature Scaling: Obtaining Well-Calibrated Multiclass Probabilities with Dirichlet
       Calibration", NeurIPS, 2019.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> wide = pd.DataFrame({"cat": [0.7, 0.2, 0.6], "dog": [0.3, 0.8, 0.4],
    ...                      "truth": ["cat", "cat", "dog"]})
    >>> top = sqlcal.multiclass(wide, format="wide", probs=["cat", "dog"], label="truth")
    >>> top.execute()
      predicted_class  score  label
    0             cat    0.7      1
    1             dog    0.8      0
    2             cat    0.6      0
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    prepared = prepare(data, format=format, example=example, cls=cls, prob=prob, label=label,
                       probs=probs, logits=logits, logit=logit, classes=classes, weight=weight,
                       keys=keys, table=table, on_invalid=on_invalid, sum_tolerance=sum_tolerance)
    result = reductions.multiclass_rows(prepared.probabilities, prepared.layout, mode,
                                       drop=prepared.drop)
    register_use_check(result, partial(_check_made_use, mode == "classwise", weight is not None))
    return result


@dataclass(frozen=True)
class Prepared:
    """A checked multiclass table: ``table`` as given, ``probabilities`` (the same table, or
    with logit columns replaced by their softmax), its ``layout`` (see
    :mod:`sqlcal.query.reductions`), whether the columns hold ``logits``, and whether invalid
    examples are to be dropped (``drop``)."""

    table: Any
    probabilities: Any
    layout: tuple
    logits: bool
    drop: bool


def prepare(data: Any, *, format: str, label: str, example: str | None = None,
            cls: str | None = None, prob: str | None = None, probs=None, logits=None,
            logit: str | None = None, classes=None, weight: str | None = None,
            keys: str | Sequence[str] = (), table: str | None = None, where: Any = None,
            on_invalid: str = "raise", sum_tolerance: float = SUM_TOLERANCE) -> Prepared:
    """Resolve and check a multiclass table (the options of :func:`multiclass`), in one
    aggregate query in the engine (a second one only to name a problem).

    Returns
    -------
    Prepared
        The table, its layout and what the checks found.

    Examples
    --------
    >>> import pandas as pd
    >>> wide = pd.DataFrame({"a": [2.0, 0.0], "b": [0.0, 1.0], "y": ["a", "a"]})
    >>> prepare(wide, format="wide", logits=["a", "b"], label="y").layout[:3]
    ('wide', (), ('a', 'b'))
    """
    if format not in FORMATS:
        raise OptionError(f"format must be 'long' or 'wide', not {format!r}")
    if on_invalid not in ("raise", "drop"):
        raise OptionError(f"on_invalid must be 'raise' or 'drop', not {on_invalid!r}")
    if (isinstance(sum_tolerance, bool) or not isinstance(sum_tolerance, (int, float))
            or not sum_tolerance >= 0):
        raise OptionError(f"sum_tolerance must be a number >= 0 (the largest |sum of an example's "
                          f"probabilities - 1| accepted), not {sum_tolerance!r}")
    t = resolve_table(data, table)
    if where is not None:
        t = apply_where(t, where)
    keys = [keys] if isinstance(keys, str) else list(keys)
    options = dict(label=label, weight=weight, keys=keys, sum_tolerance=sum_tolerance,
                   on_invalid=on_invalid)
    if format == "long":
        if logits is not None:
            raise OptionError("logits= (a list of columns) belongs to the wide format; the long "
                              "format names its logit column with logit=")
        if (prob is None) == (logit is None):
            raise OptionError("the long format needs one of prob= (the class's probability) "
                              "or logit= (the class's logit), not "
                              + ("both" if prob is not None else "neither"))
        missing = [n for n, v in (("example", example), ("cls", cls)) if v is None]
        if missing:
            raise OptionError(f"the long format needs {missing}")
        if probs is not None or classes is not None:
            raise OptionError("probs= and classes= belong to the wide format; the long format "
                              "names its class column with cls=")
        column = prob if prob is not None else logit
        _check_columns(t, [("example", example), ("class", cls),
                           ("probability" if logit is None else "logit", column),
                           ("label", label)], weight, keys)
        layout = ("long", tuple(keys), example, cls, column, label, weight)
        checked = t if logit is None else reductions.multiclass_softmax(t, layout)
        drop = _long(checked, layout=layout, **options)
    else:
        if prob is not None or logit is not None or example is not None or cls is not None:
            raise OptionError("example=, cls=, prob= and logit= belong to the long format; the "
                              "wide format takes probs= or logits=")
        if (probs is None) == (logits is None):
            raise OptionError("the wide format needs one of probs=[one probability column per "
                              "class] or logits=[one logit column per class], not "
                              + ("both" if probs is not None else "neither"))
        name = "probs" if probs is not None else "logits"
        columns = probs if probs is not None else logits
        if not columns or isinstance(columns, str):
            raise OptionError(f"{name}= must list one column per class, not {columns!r}")
        columns = [str(c) for c in columns]
        if len(set(columns)) != len(columns):
            raise OptionError(f"{name}= names a column more than once: {columns}")
        _check_columns(t, [*((("probability" if probs is not None else "logit"), c)
                             for c in columns), ("label", label)], weight, keys)
        values = _class_values(t, columns, label, classes)
        layout = ("wide", tuple(keys), tuple(columns), label, weight, tuple(values))
        checked = t if logits is None else reductions.multiclass_softmax(t, layout)
        drop = _wide(checked, layout=layout, **options)
    return Prepared(t, checked, layout, logits is not None or logit is not None, drop)


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


def _wide(t: ir.Table, *, layout, label, weight, keys, sum_tolerance, on_invalid) -> bool:
    probs, values = list(layout[2]), list(layout[5])
    texts = [f"probability column {c!r} is NULL, NaN or outside [0, 1]" for c in probs]
    texts.append(f"label column {label!r} is NULL")
    if weight:
        texts.append(f"weight column {weight!r} is NULL, NaN, negative or infinite")
    drop = False
    if reductions.is_bound(t) and not _wide_clean(_fetch(t, "multiclass_quick", layout,
                                                        sum_tolerance), len(probs), weight,
                                                sum_tolerance):
        # something is wrong: a second query counts each problem to name it
        counts = _fetch(t, "multiclass_counts", layout, sum_tolerance).iloc[0]
        layout_problems = []
        if counts.unmatched:
            # a third, small query only to name the values in the message
            seen = _fetch(t, "multiclass_unmatched", layout, sum_tolerance)
            listed = ", ".join(f"{v!r} ({n} examples)"
                               for v, n in zip(seen[label].tolist(), seen.n_.tolist()))
            more = int(counts.unmatched_values) - len(seen)
            layout_problems.append(
                f"label column {label!r} has {int(counts.unmatched)} examples whose true class "
                f"matches no probability column: {listed}"
                + (f" and {more} more values" if more > 0 else "")
                + f". The columns {probs} stand for the classes {values}: list every class's "
                "column in probs=, and pass classes=[the label value of each column, in probs "
                "order] or classes={value: column} when the labels are not the column names")
        if counts.off:
            layout_problems.append(_sum_problem(int(counts.off), float(counts.off_min),
                                                float(counts.off_max), f"columns {probs}",
                                                sum_tolerance))
        drop = _judge(counts, texts, layout_problems, on_invalid)
    return drop


def _long(t: ir.Table, *, layout, label, weight, keys, sum_tolerance, on_invalid) -> bool:
    if not (t[label].type().is_boolean() or t[label].type().is_numeric()):
        raise InvalidInputError(f"label column {label!r} has type {t[label].type()}; the long "
                                "format wants 0/1 or a boolean (1 on the true class's row)")
    example, cls, prob = layout[2:5]
    texts = [f"probability column {prob!r} is NULL, NaN or outside [0, 1]",
             f"label column {label!r} is NULL or not 0/1", f"class column {cls!r} is NULL"]
    if weight:
        texts.append(f"weight column {weight!r} is NULL, NaN, negative or infinite")
    drop = False
    if reductions.is_bound(t) and not _long_clean(_fetch(t, "multiclass_quick", layout,
                                                        sum_tolerance), weight, sum_tolerance):
        # something is wrong: a second query counts each problem to name it
        counts = _fetch(t, "multiclass_counts", layout, sum_tolerance).iloc[0]
        example_id = f"{example!r}" + (f" within keys {keys}" if keys else "")
        layout_problems = []
        if counts.repeated:
            layout_problems.append(
                f"{int(counts.repeated)} examples (by {example_id}) have more than one row for "
                f"the same class in column {cls!r}: example ids repeat, as when several models "
                "score the same examples; pass keys=[the column(s) telling them apart, such as "
                "the model] or remove the duplicate rows")
        if counts.no_true:
            layout_problems.append(
                f"{int(counts.no_true)} examples (by {example_id}) have no row with label "
                f"{label!r} = 1: each example needs exactly one true-class row (is its true "
                "class missing from the class rows?)")
        if counts.several:
            layout_problems.append(
                f"{int(counts.several)} examples (by {example_id}) have several rows with label "
                f"{label!r} = 1: each example needs exactly one true-class row")
        if counts.off:
            layout_problems.append(_sum_problem(int(counts.off), float(counts.off_min),
                                                float(counts.off_max), f"column {prob!r}",
                                                sum_tolerance))
        if weight and counts.varies:
            layout_problems.append(
                f"weight column {weight!r} differs between the rows of {int(counts.varies)} "
                "examples: an example has one weight, repeated on each of its rows")
        drop = _judge(counts, texts, layout_problems, on_invalid)
    return drop


def _fetch(t: ir.Table, kind: str, layout: tuple, sum_tolerance: float) -> pd.DataFrame:
    """One declared check of the multiclass table, through the planner: a source whose rows
    are the table as given (these summaries are its validation, so none runs before them)."""
    src = Source(rows=t, score="", label="", weight=None, by=(), on_invalid="raise",
                 allow_soft=True, float_label=False, validated=True,
                 origin="a multiclass table")
    return planner.fetch(src, declared.multiclass_check(kind, layout, sum_tolerance))


def _wide_clean(quick, n_probs: int, weight: str | None, sum_tolerance: float) -> bool:
    """Whether the cheap aggregate (``multiclass_quick``) proves every example valid: counts for
    NULLs, MIN/MAX for ranges (NaN sorts above every number in DuckDB, Postgres and Spark, so
    MAX is NaN when any value is), the extreme sums, and the labels outside the classes."""
    quick = quick.iloc[0]
    n = int(quick.n)
    tolerance_ok = (abs(float(quick.s_lo) - 1) <= sum_tolerance
                    and abs(float(quick.s_hi) - 1) <= sum_tolerance)
    highs = [1.0] * n_probs + [_LARGEST] * (weight is not None)
    return (n > 0 and int(quick.y_n) == n and int(quick.unmatched) == 0
            and all(int(quick[f"n{i}"]) == n and float(quick[f"lo{i}"]) >= 0
                    and float(quick[f"hi{i}"]) <= high for i, high in enumerate(highs))
            and tolerance_ok)


def _long_clean(quick, weight: str | None, sum_tolerance: float) -> bool:
    """Whether the cheap query (``multiclass_quick``: per example its rows, true rows, sum and
    invalid values) proves every example valid (no per-example distinct count: every example
    has one row per class of the table, or the counting query looks for repeated classes)."""
    quick = quick.iloc[0]
    k = int(quick.k)
    return (int(quick.n) > 0 and int(quick.bad) == 0 and int(quick.not_one) == 0
            and int(quick.varies) == 0 and int(quick.rows_lo) == k and int(quick.rows_hi) == k
            and abs(float(quick.s_lo) - 1) <= sum_tolerance
            and abs(float(quick.s_hi) - 1) <= sum_tolerance)


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


def _sum_problem(count: int, low: float, high: float, where: str, sum_tolerance: float) -> str:
    worst = low if abs(low - 1) >= abs(high - 1) else high
    return (f"{count} examples have probabilities ({where}) summing to other than 1 by more "
            f"than sum_tolerance={sum_tolerance:g} (the worst sums to {worst!r}): list every "
            "class's probability, renormalise them, or pass a larger sum_tolerance=")


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
        ok = (not isinstance(v, bool) or label_type.is_boolean()) and reductions.comparable(
            t[label], v)
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
