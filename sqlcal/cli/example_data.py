"""The small data files the documentation's examples read, written by ``sqlcal demo --examples``.

Each file is drawn from a fixed seed, so an example's output is the same on every machine:

- ``preds.parquet``: binary predictions with categorical features (``country``, ``device``,
  ``app_version``), calibrated except on ``country = 'BR' AND device = 'ios'`` (the true log-odds
  are the model's plus 0.6): the miscalibrated segment the segments guide finds.
- ``clicks.parquet``: a click log of five campaigns at base rates near 1%, keeping every click and
  one non-click in ten (``negative_sampling_rate=0.1``); campaign ``c3`` is over-predicted (the
  true click rate is 0.7 times the score).
- ``animals.parquet``: three-class predictions, one row per example (the wide layout): the
  probabilities ``cat``, ``dog``, ``bird``, the true class ``truth``, an example weight ``w`` and
  the model version ``model`` (``v1`` over-confident, ``v2`` calibrated).
- ``animals_long.parquet``: the same examples one row per example and class (the long layout):
  ``id``, ``model``, ``cls``, ``p``, ``label`` (1 on the true class's row) and ``w``.
- ``scored.parquet`` and ``conversions.parquet``: predictions with an example ``id`` and the
  conversions logged apart (the events layout of monitoring: one row per converted example, with
  ``converted`` = 1 and its time ``converted_at``).

A file is written only where no file is, or over a file an earlier ``sqlcal demo --examples``
wrote (its Parquet metadata says so); every path is checked before any is written, and each is
written to a temporary file and renamed into place (:func:`sqlcal.outputs.replacing`).
"""

from __future__ import annotations

import os
import stat
from typing import Callable

import numpy as np
import pandas as pd

#: the Parquet key-value metadata that marks a file this module wrote
MARKER = (b"generator", b"sqlcal demo --examples")


def write_examples(folder: str = ".", *, seed: int = 0) -> list[str]:
    """Write every example file into ``folder`` (created if missing); return their paths.

    Raises :class:`sqlcal.outputs.OutputError` before writing anything when one of the paths
    holds something an earlier ``sqlcal demo --examples`` did not write.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sqlcal.outputs import replacing

    paths = {name: os.path.join(os.fspath(folder), name) for name in EXAMPLES}
    for path in paths.values():
        check_example_path(path)
    os.makedirs(os.fspath(folder) or ".", exist_ok=True)
    frames: dict[str, pd.DataFrame] = {}
    for name, make in EXAMPLES.items():
        if name not in frames:
            frames.update(make(np.random.default_rng([seed, _SEEDS[name]])))
    written = []
    for name, path in paths.items():
        table = pa.Table.from_pandas(frames[name], preserve_index=False)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               MARKER[0]: MARKER[1]})
        with replacing(path) as partial:
            pq.write_table(table, partial)
        written.append(path)
    return written


def check_example_path(path: str) -> None:
    """Refuse a path that holds anything but an earlier example file (see
    :func:`write_examples`); raises :class:`sqlcal.outputs.OutputError`."""
    from sqlcal.outputs import OutputError

    shown = f"example file {path!r}"
    if os.path.islink(path):
        raise OutputError(f"{shown} is a symlink; run sqlcal demo --examples in another folder")
    if os.path.isdir(path):
        raise OutputError(f"{shown} is a directory; run sqlcal demo --examples in another folder")
    if not os.path.lexists(path):
        return
    if not stat.S_ISREG(os.lstat(path).st_mode):  # a FIFO would block the Parquet reader
        raise OutputError(f"{shown} is not a regular file (a FIFO, a socket or a device); run "
                          "sqlcal demo --examples in another folder")
    try:
        import pyarrow.parquet as pq

        metadata = pq.read_schema(path).metadata or {}
    except Exception:  # not Parquet, or unreadable: not ours either way
        metadata = {}
    if metadata.get(MARKER[0]) != MARKER[1]:
        raise OutputError(f"{shown} exists and was not written by sqlcal demo --examples; it is "
                          "left as it is: run sqlcal demo --examples in another folder")


def _segments(rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    n = 60_000
    country = rng.choice(["US", "BR", "DE", "IN", "FR", "JP"], n,
                         p=[0.35, 0.15, 0.15, 0.15, 0.1, 0.1])
    device = rng.choice(["ios", "android", "web"], n, p=[0.35, 0.45, 0.2])
    app_version = rng.choice(["5.1", "5.2", "5.3", "6.0"], n, p=[0.1, 0.2, 0.3, 0.4])
    logit = rng.normal(-1.0, 1.2, n)
    planted = (country == "BR") & (device == "ios")
    truth = _expit(logit + 0.6 * planted)
    return {"preds.parquet": pd.DataFrame({
        "country": country, "device": device, "app_version": app_version,
        "p": np.round(_expit(logit), 4), "y": (rng.random(n) < truth).astype(np.int8)})}


def _clicks(rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    n = 300_000
    campaign = rng.choice(["c1", "c2", "c3", "c4", "c5"], n)
    offset = pd.Series(campaign).map({"c1": -4.6, "c2": -4.4, "c3": -4.2, "c4": -4.8,
                                      "c5": -4.5}).to_numpy()
    pctr = np.round(_expit(offset + rng.normal(0, 0.8, n)), 6)
    rate = np.where(campaign == "c3", 0.7 * pctr, pctr)
    clicked = rng.random(n) < rate
    kept = clicked | (rng.random(n) < 0.1)  # every click, one non-click in ten
    return {"clicks.parquet": pd.DataFrame({
        "campaign": campaign[kept], "pctr": pctr[kept], "clicked": clicked[kept].astype(np.int8)})}


def _animals(rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    n, classes = 20_000, ["cat", "dog", "bird"]
    model = rng.choice(["v1", "v2"], n)
    logits = rng.normal(0, 1.3, (n, 3)) + np.array([0.4, 0.2, -0.6])
    true_p = _softmax(logits)
    truth = (rng.random(n)[:, None] > np.cumsum(true_p, axis=1)).sum(axis=1)
    # v1 is over-confident: its logits are the true ones times 1.6
    served = _softmax(np.where((model == "v1")[:, None], 1.6 * logits, logits))
    wide = pd.DataFrame({"id": np.arange(1, n + 1), "model": model})
    for j, name in enumerate(classes):
        wide[name] = served[:, j]
    wide["truth"] = np.array(classes)[truth]
    wide["w"] = rng.integers(1, 4, n).astype(np.float64)
    long = wide.melt(id_vars=["id", "model", "truth", "w"], value_vars=classes,
                     var_name="cls", value_name="p")
    long["label"] = (long["cls"] == long["truth"]).astype(np.int8)
    long = long.sort_values(["id", "cls"], ignore_index=True)[
        ["id", "model", "cls", "p", "label", "w"]]
    return {"animals.parquet": wide, "animals_long.parquet": long}


def _events(rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    n, days = 20_000, 14
    day = rng.integers(0, days, n)
    segment = rng.choice(["web", "ios", "android"], n)
    score = np.round(_expit(rng.normal(-1.5, 1.0, n)), 3)
    converted = rng.random(n) < score
    delay = rng.exponential(2.0, n)  # days from the prediction to the conversion
    start = np.datetime64("2026-11-01T00:00:00")
    scored = pd.DataFrame({
        "id": np.arange(1, n + 1),
        "day": (np.datetime64("2026-11-01") + day.astype("timedelta64[D]")).astype(
            "datetime64[D]"),
        "segment": segment, "score": score})
    at = start + (day * 86400 + rng.integers(0, 86400, n) + delay * 86400).astype(
        "timedelta64[s]")
    conversions = pd.DataFrame({"id": scored["id"][converted].to_numpy(),
                                "converted": np.ones(int(converted.sum()), np.int8),
                                "converted_at": at[converted]})
    return {"scored.parquet": scored, "conversions.parquet": conversions}


def _expit(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# file name -> the function that draws it (some draw two files)
EXAMPLES: dict[str, Callable] = {
    "preds.parquet": _segments,
    "clicks.parquet": _clicks,
    "animals.parquet": _animals,
    "animals_long.parquet": _animals,
    "scored.parquet": _events,
    "conversions.parquet": _events,
}
# one stream of random numbers per drawing function, so adding a file changes no other
_SEEDS = {"preds.parquet": 1, "clicks.parquet": 2, "animals.parquet": 3,
          "animals_long.parquet": 3, "scored.parquet": 4, "conversions.parquet": 4}
