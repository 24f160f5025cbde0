"""Sweeps over every public function that takes data (issue 20).

1. Invalid values: each kind of invalid value (NULL, NaN, out of range, infinite; in the score,
   label and weight), placed in a row whose score lands in the first, a middle and the last bin,
   gives the same clear error (:class:`sqlcal.InvalidInputError` naming the column, the problem
   and the count), and with ``on_invalid="drop"`` the result on the cleaned rows with the count
   dropped.
2. Weights: integer weights equal duplicated rows, and zero weights equal removed rows, for every
   data-valued argument (the main data and ``expected_cost(validation=...)``).

The oracle is the library run on rows cleaned, duplicated or filtered in pandas: a weight or a
validation rule is right when it gives what the same function gives on the rows it stands for.

Row counts. ``n`` counts rows (every result's ``n``, isotonic's blocks' ``n``, ``tce_bins``' ``n``,
``metric_series``' ``n``): a row of weight 2 is one row, not two, so these are compared through
``W`` (the weight) in the duplication sweep and left out of the comparison there. A zero-weight row
is an absent row, so in the zero-weight sweep every column, ``n`` included, must match.

Every public name must be classified below (swept, or not swept with the reason), so a new public
function cannot be missed silently.
"""

from __future__ import annotations

import inspect
import json
import re
import warnings

import ibis
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import sqlcal
from sqlcal import InvalidInputError

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import sqlcal.plots  # noqa: E402
import sqlcal.recalibration.fits  # noqa: E402

# -- the functions swept ---------------------------------------------------------------------

ACTIONS = [(1.0, 0.0), (0.1, 0.3), (0.0, 0.6)]
RULES = {"two": [(-1.0, 0.3, 1.0, 0.0), (0.3, 1.0, 0.0, 0.6)]}


def _series(d, **k):
    return sqlcal.metric_series(d, time="t", metrics=["ece", "brier", "cutoff_error"], **k)


#: name -> call(data, **keywords); a name "f[variant]" sweeps f with other options (another path
#: through the summaries: another first scan to validate, another finish to weight)
SWEPT = {
    "brier": lambda d, **k: sqlcal.brier(d, **k),
    "brier_decomposition": lambda d, **k: sqlcal.brier_decomposition(d, **k),
    "brier_decomposition[quantile]":
        lambda d, **k: sqlcal.brier_decomposition(d, strategy="quantile", **k),
    "calibration_decision_loss": lambda d, **k: sqlcal.calibration_decision_loss(d, **k),
    "calibration_in_the_large": lambda d, **k: sqlcal.calibration_in_the_large(d, **k),
    "calibration_slope": lambda d, **k: sqlcal.calibration_slope(d, **k),
    "cutoff_error": lambda d, **k: sqlcal.cutoff_error(d, **k),
    "cutoff_error[grid]": lambda d, **k: sqlcal.cutoff_error(d, method="grid", cells=64, **k),
    "decision_loss": lambda d, **k: sqlcal.decision_loss(d, threshold=[0.3, 0.5], **k),
    "decision_loss[payoffs]": lambda d, **k: sqlcal.decision_loss(
        d, payoffs=[[1.0, 0.0], [0.2, 0.7], [0.0, 1.0]], **k),
    "decision_risk_gap": lambda d, **k: sqlcal.decision_risk_gap(d, threshold=[0.3, 0.5], **k),
    "decompose": lambda d, **k: sqlcal.decompose(d, **k),
    "decompose[log]": lambda d, **k: sqlcal.decompose(d, scoring="log_loss", **k),
    "distance_to_calibration": lambda d, **k: sqlcal.distance_to_calibration(d, **k),
    "ece": lambda d, **k: sqlcal.ece(d, **k),
    "ece[quantile]": lambda d, **k: sqlcal.ece(d, strategy="quantile", **k),
    "ece[relplot]": lambda d, **k: sqlcal.ece(d, convention="relplot", **k),
    "ece[sklearn]": lambda d, **k: sqlcal.ece(d, convention="sklearn", **k),
    "expected_cost": lambda d, **k: sqlcal.expected_cost(d, rules=RULES, actions=ACTIONS,
                                                         epsilon=0.05, **k),
    "expected_cost[unlabelled]": lambda d, **k: sqlcal.expected_cost(
        d, actions=ACTIONS, epsilon=0.05, **{a: v for a, v in k.items() if a != "label"}),
    "hosmer_lemeshow": lambda d, **k: sqlcal.hosmer_lemeshow(d, **k),
    "hosmer_lemeshow[uniform]": lambda d, **k: sqlcal.hosmer_lemeshow(d, strategy="uniform", **k),
    "interval_calibration_error": lambda d, **k: sqlcal.interval_calibration_error(d, **k),
    "isotonic": lambda d, **k: sqlcal.isotonic(d, **k),
    "isotonic[engine]": lambda d, **k: sqlcal.isotonic(d, method="engine", **k),
    "ks": lambda d, **k: sqlcal.ks(d, **k),
    "kuiper": lambda d, **k: sqlcal.kuiper(d, **k),
    "lipschitz_calibration_error": lambda d, **k: sqlcal.lipschitz_calibration_error(d, **k),
    "log_loss": lambda d, **k: sqlcal.log_loss(d, **k),
    "ls_ece": lambda d, **k: sqlcal.ls_ece(d, **k),
    "metric_series": _series,
    "platt": lambda d, **k: sqlcal.platt(d, **k),
    "reliability": lambda d, **k: sqlcal.reliability(d, **k),
    "report": lambda d, **k: sqlcal.report(d, **k),
    "smooth_ece": lambda d, **k: sqlcal.smooth_ece(d, **k),
    "smooth_ece[sigma]": lambda d, **k: sqlcal.smooth_ece(d, sigma=0.05, **k),
    "smooth_reliability": lambda d, **k: sqlcal.smooth_reliability(d, points=21, **k),
    "spiegelhalter": lambda d, **k: sqlcal.spiegelhalter(d, **k),
    "tce": lambda d, **k: sqlcal.tce(d, **k),
    "tce[quantile]": lambda d, **k: sqlcal.tce(d, strategy="quantile", bins=5, **k),
    "tce_bins": lambda d, **k: sqlcal.tce_bins(d, **k),
    "calibration_ratio": lambda d, **k: sqlcal.calibration_ratio(d, **k),
    "calibration_ratio[deciles]": lambda d, **k: sqlcal.calibration_ratio(d, deciles=4, **k),
    "normalized_entropy": lambda d, **k: sqlcal.normalized_entropy(d, **k),
    "debiased_ece": lambda d, **k: sqlcal.debiased_ece(d, **k),
    "segments": lambda d, **k: sqlcal.segments(d, features=["t"], max_depth=1, min_support=1,
                                               min_expected=1, mode="full", **k),
    "multicalibration": lambda d, **k: sqlcal.multicalibration(
        d, features=["t"], max_depth=1, min_support=1, min_expected=1, **k),
    "plots.reliability_diagram": lambda d, **k: sqlcal.plots.reliability_diagram(d, **k),
    "plots.smooth_reliability_diagram":
        lambda d, **k: sqlcal.plots.smooth_reliability_diagram(d, **k),
    # one group per diagram: drawn for all the rows
    "plots.tce_diagram": lambda d, **k: sqlcal.plots.tce_diagram(
        d, **{a: v for a, v in k.items() if a != "by"}),
    "plots.cumulative_plot": lambda d, **k: sqlcal.plots.cumulative_plot(d, cells=64, **k),
    # unpaired: the same rows as the baseline's (both sides validated and weighted alike);
    # paired: a second score column of the same rows (invalid where the score is)
    "compare": lambda d, **k: sqlcal.compare(d, baseline_data=d, bootstrap=200, **k),
    "compare[paired]": lambda d, **k: sqlcal.compare(
        d.mutate(q=d.p * 0.8 + 0.1), baseline="q", bootstrap=200, **k),
}

#: public names that are not swept, and why
NOT_SWEPT = {
    "InvalidInputError": "an exception class",
    "Source": "the class source() returns",
    "source": "builds the Source every swept function validates through (drop mode is swept "
              "through each function's on_invalid='drop')",
    "multiclass": "reshapes multiclass tables into a score/label table; swept by its own tests "
                  "(tests/test_multiclass.py)",
    "plots.cumulative_curve": "takes a cells summary frame, not data",
    "summary_sql": "takes no data: it returns SQL text (tests/test_export.py runs it on engines)",
    "from_summaries": "takes summary frames whose validation columns it checks as the engine "
                      "path does (tests/test_export.py: invalid rows seen in the frames)",
    "class_summary": "takes a metric's per-class result frame, not data",
    "classwise": "runs a metric on a multiclass table, validated by multiclass() "
                 "(tests/test_multiclass*.py)",
    "temperature_scaling": "reads a multiclass table, validated as multiclass() does "
                           "(tests/test_multiclass_temperature.py: refused inputs)",
    "snapshot": "writes a summary store; its rows pass the same source() checks in the first "
                "scan of each period (tests/test_monitor_store.py)",
    "stored": "reads a summary store, not rows",
    "detect": "reads a summary store, not rows",
    "segment_fix": "fits on a fold and accepts on a holdout of the rows segments() reads "
                   "(swept through segments and multicalibration, the same source and checks)",
}

#: the second data-valued arguments: name -> call(data, validation, **keywords)
SECOND_DATA = {
    "expected_cost(validation=)": lambda d, v, **k: sqlcal.expected_cost(
        d, rules=RULES, actions=ACTIONS, validation=v,
        validation_label=None if isinstance(v, sqlcal.Source) else "y", **k),
}


def _public_names() -> set[str]:
    names = set(sqlcal.__all__)
    names |= {f"plots.{n}" for n, f in vars(sqlcal.plots).items()
              if inspect.isfunction(f) and f.__module__ == "sqlcal.plots" and not n.startswith("_")}
    return names


def test_every_public_function_is_classified():
    swept = {name.split("[")[0] for name in SWEPT}
    missing = _public_names() - swept - set(NOT_SWEPT)
    assert not missing, f"public functions neither swept nor excused: {sorted(missing)}"
    gone = (swept | set(NOT_SWEPT)) - _public_names()
    assert not gone, f"classified names that are not public: {sorted(gone)}"
    # every function with a data argument and a weight option is swept
    for name in _public_names() - set(NOT_SWEPT):
        f = getattr(sqlcal.plots, name[6:]) if name.startswith("plots.") else getattr(sqlcal, name)
        params = inspect.signature(f).parameters
        assert "data" in params and "weight" in params, name


# -- data ------------------------------------------------------------------------------------

#: a score in the first, a middle and the last of 15 equal-width bins (and of the deciles)
POSITIONS = {"first": 0.02, "middle": 0.5, "last": 0.98}
GROUPS = ("a", "b", "c")


def clean_rows(n: int = 240, seed: int = 0, *, weights: str = "integer") -> pd.DataFrame:
    """Scores with ties (two decimals) in every bin of every group, miscalibrated labels, three
    groups, a time key, and weights (``"integer"`` 1..3, ``"zero"`` 0..3, ``"fractional"`` with
    zeros, or ``"none"``: all 1)."""
    rng = np.random.default_rng(seed)
    p = np.round(rng.uniform(0, 1, n), 2)
    p[: 3 * 6] = np.tile([0.0, 0.01, 0.02, 0.5, 0.98, 1.0], 3)  # the edges in every group
    y = (rng.random(n) < np.clip(1.3 * p - 0.1, 0, 1)).astype(np.int64)
    g = np.array(GROUPS)[np.arange(n) % 3]
    if weights == "integer":
        w = rng.integers(1, 4, n).astype(float)
    elif weights == "zero":
        w = rng.integers(0, 4, n).astype(float)
    elif weights == "fractional":
        w = np.round(rng.exponential(1.0, n), 3) * (rng.random(n) > 0.25)
    else:
        w = np.ones(n)
    return pd.DataFrame({"p": p, "y": y, "w": w, "g": g, "t": np.arange(n) % 2})


#: kind -> (column, value, the message's "<role> column '<col>' has 1 rows <problem>" tail)
KINDS = {
    "score NULL": ("p", None, "score column 'p' has 1 rows that are NULL"),
    "score NaN": ("p", np.nan, "score column 'p' has 1 rows that are NaN"),
    "score < 0": ("p", -0.25, "score column 'p' has 1 rows outside [0, 1]"),
    "score > 1": ("p", 1.25, "score column 'p' has 1 rows outside [0, 1]"),
    "score +inf": ("p", np.inf, "score column 'p' has 1 rows outside [0, 1]"),
    "label NULL": ("y", None, "label column 'y' has 1 rows that are NULL"),
    "label NaN": ("y", np.nan, "label column 'y' has 1 rows that are NaN"),
    "label 2": ("y", 2, "label column 'y' has 1 rows outside [0, 1]"),
    "label -1": ("y", -1, "label column 'y' has 1 rows outside [0, 1]"),
    "label 0.5": ("y", 0.5, "label column 'y' has 1 rows outside {0, 1}"),
    "weight NULL": ("w", None, "weight column 'w' has 1 rows that are NULL"),
    "weight NaN": ("w", np.nan, "weight column 'w' has 1 rows that are NaN"),
    "weight negative": ("w", -1.0, "weight column 'w' has 1 rows negative"),
    "weight inf": ("w", np.inf, "weight column 'w' has 1 rows infinite"),
}


def with_invalid(clean: pd.DataFrame, kind: str, positions) -> pa.Table:
    """``clean`` plus one invalid row of ``kind`` per position, as an Arrow table (pandas would
    turn NaN into NULL; Arrow keeps them apart). The invalid row's score puts it in that
    position's bin (unless the score is the invalid value), its group cycles through the groups."""
    column, value, _ = KINDS[kind]
    extra = []
    for i, position in enumerate(positions):
        row = {"p": POSITIONS[position], "y": 1 if position == "last" else 0, "w": 2.0,
               "g": GROUPS[(i + 1) % 3], "t": i % 2}
        row[column] = value
        extra.append(row)
    rows = clean.to_dict("records") + extra
    label_float = kind in ("label NaN", "label 0.5")
    types = {"p": pa.float64(), "y": pa.float64() if label_float else pa.int64(),
             "w": pa.float64(), "g": pa.string(), "t": pa.int64()}
    return pa.table({c: pa.array([r[c] for r in rows], type=types[c], from_pandas=False)
                     for c in types})


def result_numbers(out):
    """A function's result as a frame: a map's table, a diagram's plotted data."""
    if isinstance(out, pd.DataFrame):
        return out.reset_index(drop=True)
    if hasattr(out, "table") and hasattr(out, "transform"):  # a CalibrationMap
        return out.table.reset_index(drop=True)
    if hasattr(out, "lines"):  # matplotlib Axes: every line, bar and band it drew
        parts = [line.get_xydata() for line in out.lines]
        for axes in [out, *out.child_axes]:
            parts += [np.array([[b.get_x(), b.get_height()] for b in axes.patches])
                      .reshape(-1, 2)]
            parts += [np.vstack([p.vertices for p in c.get_paths()] or [np.zeros((0, 2))])
                      for c in axes.collections]
        plt.close(out.figure)
        xy = np.vstack([np.asarray(p, float).reshape(-1, 2) for p in parts])
        return pd.DataFrame({"x": xy[:, 0], "y": xy[:, 1]})
    raise TypeError(f"cannot compare a {type(out).__name__}")


def assert_same(got, want, *, skip=(), context=""):
    """Same columns (but ``skip``), equal keys and labels, numbers equal to 1e-12."""
    if isinstance(want, Exception) or isinstance(got, Exception):
        assert type(got) is type(want) and str(got) == str(want), f"{context}: {got!r} != {want!r}"
        return
    got, want = result_numbers(got), result_numbers(want)
    cols = [c for c in want.columns if c not in skip]
    assert [c for c in got.columns if c not in skip] == cols, context
    assert len(got) == len(want), f"{context}: {len(got)} rows, want {len(want)}"
    for c in cols:
        a, b = got[c], want[c]
        if pd.api.types.is_numeric_dtype(b) and not pd.api.types.is_bool_dtype(b):
            np.testing.assert_allclose(a.to_numpy(float), b.to_numpy(float), rtol=1e-12,
                                       atol=1e-12, equal_nan=True, err_msg=f"{context}: {c}")
        else:
            flat = lambda s: [np.asarray(v, float).ravel() if isinstance(v, (list, tuple))
                              else v for v in s]
            for x, y in zip(flat(a), flat(b)):
                if isinstance(y, np.ndarray):
                    np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12,
                                               err_msg=f"{context}: {c}")
                else:
                    assert x == y or (pd.isna(x) and pd.isna(y)), f"{context}: {c}: {x} != {y}"


def quiet(call, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call(*args, **kwargs)


def outcome(call, *args, **kwargs):
    """The result, or the InvalidInputError raised (a function may refuse both inputs alike,
    e.g. TCE refuses fractional weights): compared by ``assert_same``."""
    try:
        return quiet(call, *args, **kwargs)
    except InvalidInputError as e:
        return e


KEYWORDS = dict(score="p", label="y", weight="w", by="g")


def run(name: str, data, **keywords):
    return quiet(SWEPT[name], data, **{**KEYWORDS, **keywords})


_on_clean_rows: dict = {}


def on_clean_rows(name: str):
    """The function on the clean rows: the oracle of every drop test (computed once)."""
    if name not in _on_clean_rows:
        _on_clean_rows[name] = result_numbers(run(name, ibis.memtable(clean_rows())))
    return _on_clean_rows[name]


# -- 1. invalid values -----------------------------------------------------------------------

#: an invalid score decides its own bin; an invalid label or weight sits in each bin in turn
CASES = [(kind, position) for kind in KINDS
         for position in (("last",) if kind.startswith("score") else POSITIONS)]
LABEL_FREE = {"expected_cost[unlabelled]"}  # reads no label: a bad label is no error


@pytest.mark.parametrize("kind, position", CASES, ids=[f"{k}-{p}" for k, p in CASES])
@pytest.mark.parametrize("name", SWEPT)
def test_invalid_value_raises(name, kind, position):
    table = ibis.memtable(with_invalid(clean_rows(), kind, [position]))
    if name in LABEL_FREE and kind.startswith("label"):
        run(name, table)
        return
    with pytest.raises(InvalidInputError, match=re.escape(KINDS[kind][2])):
        result_numbers(run(name, table))


#: failures in files this sweep's author does not own, with their owner (none left)
XFAIL_DROP: dict[str, str] = {}

#: every kind at once, one row per position: dropped whatever bin or group they would land in
ALL_INVALID = list(CASES)
#: swept on their own too: a fractional-weight check once cast FLOOR to BIGINT and failed on them
NON_FINITE_WEIGHTS = ("weight NaN", "weight inf")


def _all_invalid() -> pa.Table:
    clean = clean_rows()
    tables = [with_invalid(clean.iloc[:0], kind, [position]) for kind, position in ALL_INVALID]
    # spread over the groups: kind i in group i mod 3
    tables = [t.set_column(3, "g", pa.array([GROUPS[i % 3]])) for i, t in enumerate(tables)]
    cast = pa.schema([("p", pa.float64()), ("y", pa.float64()), ("w", pa.float64()),
                      ("g", pa.string()), ("t", pa.int64())])
    extra = pa.concat_tables([t.cast(cast) for t in tables])
    return pa.concat_tables([pa.Table.from_pandas(clean, preserve_index=False).cast(cast), extra])


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.xfail(
    strict=True, reason=XFAIL_DROP[name])) if name in XFAIL_DROP else name for name in SWEPT])
def test_drop_equals_the_clean_rows(name):
    table = _all_invalid()
    out = run(name, ibis.memtable(table), on_invalid="drop")
    if isinstance(out, sqlcal.recalibration.fits.CalibrationMap):  # its per-group counts in .info
        dropped = out.info["dropped"]
        out.table["n_dropped"] = out.table["g"].map(dict(zip(dropped["g"], dropped["n_dropped"])))
    got = result_numbers(out)
    # n_dropped: per group, the invalid rows placed in it (every kind, every position)
    frame = table.to_pandas()
    bad = frame.iloc[len(clean_rows()):]
    if name in LABEL_FREE:  # a bad label is no bad row when no label is read
        bad = bad[[not kind.startswith("label") for kind, _ in ALL_INVALID]]
        kept = frame.drop(index=bad.index).reset_index(drop=True)
        want = result_numbers(run(name, ibis.memtable(kept)))
    else:
        want = on_clean_rows(name)
    if "n_dropped" in got:
        per_group = bad.groupby("g").size().reindex(list(GROUPS), fill_value=0)
        keyed = got.drop_duplicates("g") if "g" in got else got
        if "g" in got:
            assert keyed.set_index("g")["n_dropped"].to_dict() == per_group.to_dict()
        else:
            assert int(keyed["n_dropped"].iloc[0]) == len(bad)
        if "baseline_n_dropped" in got:  # sqlcal.compare: the baseline's rows, the same ones
            assert (got["baseline_n_dropped"] == got["n_dropped"]).all()
            got = got.drop(columns="baseline_n_dropped")
        got = got.drop(columns="n_dropped")
    else:
        assert name.startswith("plots."), f"{name} reports no n_dropped column"
    assert_same(got, want, context=name)


@pytest.mark.parametrize("kind", NON_FINITE_WEIGHTS)
def test_drop_nan_or_infinite_weight(kind):
    table = ibis.memtable(with_invalid(clean_rows(), kind, ["middle"]))
    got = run("ece", table, on_invalid="drop")
    assert got["n_dropped"].sum() == 1
    assert_same(got.drop(columns="n_dropped"), on_clean_rows("ece"), context=kind)


# -- 2. weights ------------------------------------------------------------------------------

#: row counts: a row of weight 2 is one row (see the module's docstring); calibration_decision_loss's
#: distinct_per_row is n_levels / n, a ratio of counts
ROW_COUNTS = ("n", "distinct_per_row", "n_positive", "baseline_n")


def duplicated(df: pd.DataFrame) -> pd.DataFrame:
    """Each row repeated w times, with weight 1."""
    out = df.loc[df.index.repeat(df["w"].astype(int))].reset_index(drop=True)
    return out.assign(w=1.0)


@pytest.mark.parametrize("name", SWEPT)
def test_integer_weights_equal_duplicated_rows(name):
    df = clean_rows(seed=1, weights="integer")
    got = outcome(run, name, ibis.memtable(df))
    want = outcome(run, name, ibis.memtable(duplicated(df)), weight=None)
    assert_same(without_row_counts(got), without_row_counts(want), skip=ROW_COUNTS,
                context=name)


def without_row_counts(out):
    """A segment search's ``searched`` statement without its row counts per fold (duplicated
    rows are more rows; the folds' weights, which it also states, must agree)."""
    if not (isinstance(out, pd.DataFrame) and "searched" in out):
        return out
    def drop(text):
        stated = json.loads(text)
        stated.pop("fold_rows", None)
        return json.dumps(stated, sort_keys=True)
    return out.assign(searched=out["searched"].map(drop))


def _zero_cases():
    for name in SWEPT:
        for weights in ("zero", "fractional"):
            yield pytest.param(name, weights, id=f"{name}-{weights}")


@pytest.mark.parametrize("name, weights", _zero_cases())
def test_zero_weights_equal_removed_rows(name, weights):
    df = clean_rows(seed=2, weights=weights)
    assert (df["w"] == 0).mean() > 0.1
    got = outcome(run, name, ibis.memtable(df))
    want = outcome(run, name, ibis.memtable(df[df["w"] > 0].reset_index(drop=True)))
    assert_same(got, want, skip=ROW_COUNTS, context=name)


def _as_source(frame: pd.DataFrame):
    return sqlcal.source(ibis.memtable(frame), score="p", label="y", weight="w", by="g")


#: how the second dataset is given: as data (read with the call's options) or as a Source
SECOND_FORMS = {"data": lambda frame: ibis.memtable(frame), "source": _as_source}


@pytest.mark.parametrize("form", SECOND_FORMS)
@pytest.mark.parametrize("name", SECOND_DATA)
def test_second_data_integer_weights_equal_duplicated_rows(name, form):
    main = clean_rows(seed=3, weights="integer")
    second = clean_rows(seed=4, weights="integer")
    call = lambda v: quiet(SECOND_DATA[name], ibis.memtable(main), v, **KEYWORDS)
    got = call(SECOND_FORMS[form](second))
    dup = duplicated(second)
    want = call(SECOND_FORMS[form](dup))  # weight 1 on every row
    assert_same(got, want, skip=ROW_COUNTS, context=name)


@pytest.mark.parametrize("form", SECOND_FORMS)
@pytest.mark.parametrize("weights", ["zero", "fractional"])
@pytest.mark.parametrize("name", SECOND_DATA)
def test_second_data_zero_weights_equal_removed_rows(name, weights, form):
    main = clean_rows(seed=3, weights=weights)
    second = clean_rows(seed=4, weights=weights)
    call = lambda v: quiet(SECOND_DATA[name], ibis.memtable(main), v, **KEYWORDS)
    got = call(SECOND_FORMS[form](second))
    want = call(SECOND_FORMS[form](second[second["w"] > 0].reset_index(drop=True)))
    assert_same(got, want, skip=ROW_COUNTS, context=name)


# -- the same errors on every engine: a few functions and kinds --------------------------------

ENGINE_FUNCTIONS = ("ece", "cutoff_error", "brier")  # equal-width bins, score cells, totals
ENGINE_KINDS = ("score NULL", "label 2", "weight negative")


@pytest.mark.parametrize("kind", ENGINE_KINDS)
@pytest.mark.parametrize("name", ENGINE_FUNCTIONS)
def test_invalid_value_raises_on_every_engine(upload, name, kind):
    position = "last"  # a NULL score once landed in the last bin, unseen
    frame = with_invalid(clean_rows(), kind, [position]).to_pandas()
    if kind == "score NULL":  # NULL, not NaN, on every engine (Spark keeps a pandas NaN)
        frame["p"] = frame["p"].astype(object).where(frame["p"].notna(), None)
    with pytest.raises(InvalidInputError, match=re.escape(KINDS[kind][2])):
        run(name, upload(frame))
