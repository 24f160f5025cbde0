"""Rules every generated query keeps (DESIGN.md): no window spans a group's raw rows without a
PARTITION BY, and ROWS frames only run over tables whose order key is unique."""

from __future__ import annotations

import re

import ibis
import pytest
import sqlglot
from sqlglot import exp

from sqlcal.inputs.sources import check_exprs, valid_expr
from sqlcal.query import declared, reductions

SCHEMA = {"g": "string", "p": "float64", "y": "int64", "w": "float64"}


def queries(by):
    t = ibis.table(SCHEMA, name="predictions")
    parts = frozenset({"sums", "sw2", "moments", "residuals", "logloss"})
    # cells 1, 2 and 3 of the 1024-cell grid (of group "a")
    ranges = (((("a",) if by else ()), 1 / 1024, 4 / 1024),)
    follow_up = lambda s: reductions.reduce(s, t, by, weighted=True)  # noqa: E731
    return {
        "validation": reductions.validation(t, by, check_exprs(t, True), valid_expr(t, True, False)),
        "totals": reductions.totals(t, by, parts, weighted=True),
        "uniform_bins": reductions.uniform_bins(t, by, 15, "netcal", parts, weighted=True),
        "cells": reductions.cells(t, by, 1024, parts, weighted=True),
        "cells_within": follow_up(declared.cells_within(2**20, ranges, *parts)),
        "levels_within": follow_up(declared.levels_within(ranges, *parts)),
        "extremes_within": follow_up(declared.extremes_within(1024, ranges)),
        "logit_grid": reductions.logit_grid(t, by, 0.005, 1e-6, weighted=True),
    }


@pytest.mark.parametrize("by", [(), ("g",)])
def test_no_window_spans_a_groups_raw_rows(by):
    for name, expr in queries(by).items():
        tree = sqlglot.parse_one(ibis.to_sql(expr, dialect="duckdb"), read="duckdb")
        for window in tree.find_all(exp.Window):
            partition = [c.sql() for c in window.args.get("partition_by") or []]
            assert partition, f"{name}: a window with no PARTITION BY"
            # the only window on raw rows is the segmented scan, partitioned by the score cell
            assert any("cell" in c for c in partition), f"{name}: {window.sql()}"
            spec = window.args.get("spec")
            if spec is not None:
                assert spec.args.get("kind", "").upper() == "RANGE", (
                    f"{name}: a ROWS frame over raw rows splits ties: {window.sql()}")
            for key in by:
                assert any(re.search(rf"\b{key}\b", c) for c in partition), name


def test_multiclass_top_label_window_is_partitioned_by_example():
    t = ibis.table({"model": "string", "example": "int64", "cls": "string", "prob": "float64",
                    "label": "int64"}, name="scores")
    import sqlcal

    expr = sqlcal.multiclass(t, format="long", example="example", cls="cls", prob="prob",
                             label="label", keys=["model"])
    tree = sqlglot.parse_one(ibis.to_sql(expr, dialect="duckdb"), read="duckdb")
    windows = list(tree.find_all(exp.Window))
    assert windows
    for window in windows:
        partition = [c.sql() for c in window.args.get("partition_by") or []]
        assert any("example" in c for c in partition) and any("model" in c for c in partition)
