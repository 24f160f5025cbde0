"""Sources of tables with no label column, for the label-free metrics (the expected cost of
decision rules on an unlabeled table).

A :class:`~sqlcal.inputs.sources.Source` always has a label; an unlabeled table gets a constant
label column (0), so the shared validation of scores, weights and keys applies unchanged and every
summary keeps its shape. A metric reading such a source never reads its label sums. (This is the
input normalisation of the source layer; it sits here, beside the queries, until
:func:`sqlcal.source` takes ``label=None`` itself.)
"""

from __future__ import annotations

from typing import Any, Sequence

import ibis

from sqlcal.inputs.sources import Source, resolve_table
from sqlcal.query.executor import source

#: the name of the constant label column given to an unlabeled table
NO_LABEL = "__sqlcal_no_label"


def unlabeled_source(data: Any, *, score: str, weight: str | None = None,
                     by: str | Sequence[str] = (), where: Any = None,
                     **options: Any) -> Source:
    """A source of a table without labels: ``data`` with a constant label column ``NO_LABEL``.

    Parameters
    ----------
    data : ibis Table, path, URL or frame
        As for :func:`sqlcal.source`.
    score, weight, by, where
        As for :func:`sqlcal.source`.
    **options
        Further options of :func:`sqlcal.source` (``table=``, ``on_invalid=``, ...).

    Returns
    -------
    Source
        A source whose label is the constant 0.

    Examples
    --------
    >>> import pandas as pd
    >>> src = unlabeled_source(pd.DataFrame({"p": [0.2, 0.7]}), score="p")
    >>> src.label == NO_LABEL
    True
    """
    options = dict(options)
    base = resolve_table(data, options.pop("table", None))
    base = base.mutate(**{NO_LABEL: ibis.literal(0, type="int64")})
    return source(base, score=score, label=NO_LABEL, weight=weight, by=by, where=where,
                  **options)
