"""The planner: the summaries a set of metrics needs, in the fewest scans.

:func:`prefetch` takes declared summaries (:mod:`sqlcal.query.declared`), drops the ones a source
already holds, and runs the rest: the first-stage summaries that one GROUP BY can produce together
(totals, equal-width bins, score cells) as one fused scan, split afterwards in pandas by their
merge rules; any other summary on its own. Every result is cached on the source, where the
metrics' own requests find it, so a report reads the table once for all of them.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from sqlcal import summaries
from sqlcal.query import local
from sqlcal.query.declared import FUSABLE, Summary, coarser_cells, merge, union
from sqlcal.source import Planned, Source


def fetch(src: Source, summary: Summary) -> pd.DataFrame:
    """One declared summary of ``src``: cached, or one scan (validating the source on its first).
    A source holding the levels of its rows (built by :func:`sqlcal.from_summaries`) evaluates
    the summary from them in pandas instead (:mod:`sqlcal.query.local`)."""
    if src.local_levels is not None:
        have = src.lookup(summary.key, summary.parts)
        return have if have is not None else src.store(
            summary.key, summary.parts, local.evaluate(summary, src.local_levels, src.by))
    return src.summary(summary.key, summary.parts, lambda checks: summaries.reduce(
        summary, src.rows, src.by, weighted=src.weighted, checks=checks,
        soft=src.allow_soft))


def prefetch(src: Source, needs: Iterable[Summary]) -> list[tuple[str, list[Summary]]]:
    """Run every summary in ``needs`` that ``src`` does not hold yet, in the fewest scans.

    Returns the scans run, as ``(description, summaries)`` pairs (for progress lines and tests).
    """
    wanted = [s for s in union(needs) if src.lookup(s.key, s.parts) is None]
    return [(_describe(group), run(src, group)) for group in plan(wanted)]


def steps(src: Source, needs: Iterable[Summary]) -> list[tuple[str, callable]]:
    """The scans :func:`prefetch` would run, as ``(description, run)`` pairs, each ``run()`` one
    engine pass (a scheduled report calls them one by one to show progress)."""
    wanted = [s for s in union(needs) if src.lookup(s.key, s.parts) is None]
    return [(_describe(group), lambda group=group: run(src, group)) for group in plan(wanted)]


def plan(wanted: list[Summary]) -> list[list[Summary]]:
    """Group summaries into scans: every fusable summary in one, each other one alone."""
    fusable = [s for s in wanted if s.kind in FUSABLE]
    scans = [fusable] if len(fusable) > 1 else [[s] for s in fusable]
    return scans + [[s] for s in wanted if s.kind not in FUSABLE]


def run(src: Source, group: list[Summary]) -> list[Summary]:
    """Run one scan of :func:`plan` and cache each summary it holds on ``src``."""
    if len(group) == 1 or src.local_levels is not None:
        for summary in group:
            fetch(src, summary)
        return group
    # named by its members: an in-memory source reuses the compiled statement (Planned)
    frame = src.run(Planned(lambda checks: summaries.fused(
        group, src.rows, src.by, weighted=src.weighted, checks=checks, soft=src.allow_soft),
        ("fused", *((s.key, s.parts) for s in group))))
    for summary in group:
        src.store(summary.key, summary.parts, split(frame, summary, group, src))
    return group


def split(frame: pd.DataFrame, summary: Summary, group: list[Summary], src: Source
          ) -> pd.DataFrame:
    """One member of a fused scan: its key column made from the fused keys, its own columns
    (those its own query would return) merged over the others' keys."""
    by = list(src.by)
    part = frame
    key = summary.key_column
    if summary.kind == "uniform":
        index = [s for s in group if s.kind == "uniform"].index(summary)
        part = frame.rename(columns={f"bin_{index}": "bin"})
    elif summary.kind == "cells":
        finest = max(s.params[0] for s in group if s.kind == "cells")
        part = frame.assign(cell=coarser_cells(frame["cell"].to_numpy(), finest,
                                               summary.params[0]))
    own = _columns(summary, src)
    keys = [*by, key] if key else by
    out = merge([part[[*keys, *own]]], keys)
    if not by and not key:
        out = out.astype({c: frame[c].dtype for c in own if frame[c].dtype.kind in "iu"})
    return out


def _columns(summary: Summary, src: Source) -> list[str]:
    """The value columns the summary's own query returns (read from its Ibis schema, not run)."""
    expr = summaries.reduce(summary, src.rows, src.by, weighted=src.weighted,
                            soft=src.allow_soft)
    key = summary.key_column
    return [c for c in expr.columns if c not in (*src.by, key)]


def _describe(group: list[Summary]) -> str:
    names = ", ".join(s.name for s in group)
    return f"summaries: {names} (one scan)" if len(group) > 1 else f"summary: {names}"
