"""Maps at scale: a large isotonic or Platt map is applied as a join to its mapping table (an
equi-join on the group keys and a score bucket), with the same values as the inlined CASE and as
numpy, on every engine; ``write`` takes the table's location."""

from __future__ import annotations

import ibis
import numpy as np
import pandas as pd
import pytest
from sklearn.isotonic import IsotonicRegression

import sqlcal
from sqlcal.options import OptionError
from sqlcal.recalibration import maps


def _rows(n=6000, seed=3):
    """Continuous scores in two groups and a NULL group; the labels make hundreds of blocks."""
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.beta(2, 3, n - 400), rng.uniform(0.4, 0.4001, 400)])  # a dense spot
    y = (rng.random(n) < p ** 1.3).astype(np.int64)
    g = np.where(np.arange(n) % 3 == 0, None, np.where(np.arange(n) % 3 == 1, "a", "b"))
    return pd.DataFrame({"p": p, "y": y, "g": pd.Series(g, dtype=object)})


def _probe(m: maps.IsotonicMap) -> pd.DataFrame:
    """Every block boundary and end, points between, outside [0, 1], NaN and NULL, in each
    group, a NULL group and a group the map does not know."""
    edges = np.unique(np.concatenate([m.table.lo, m.table.hi]))
    mids = (edges[1:] + edges[:-1]) / 2
    p = np.concatenate([edges, mids, [-0.5, 0.0, 1.0, 1.5, np.nan]])
    frames = [pd.DataFrame({"p": p, "g": key}) for key in ("a", "b", None, "zz")]
    probe = pd.concat(frames, ignore_index=True)
    probe["g"] = probe["g"].astype(object).where(probe["g"].notna(), None)
    probe["i"] = np.arange(len(probe))
    return probe


def _values(table, order="i"):
    frame = table.execute().sort_values(order)
    return frame.calibrated.to_numpy(float)


@pytest.mark.cluster
def test_large_isotonic_map_joins_with_the_inline_values(upload, con):
    df = _rows()
    m = sqlcal.isotonic(df, score="p", label="y", by="g")
    assert len(m.table) > maps.INLINE_ROWS  # so apply joins by default
    probe = _probe(m)
    want = m.transform_frame(probe, "p")
    # independent: scikit-learn's fit of each group, clipped outside the fitted range
    for key, rows in (("a", df.g == "a"), ("b", df.g == "b"), (None, df.g.isna())):
        iso = IsotonicRegression(out_of_bounds="clip").fit(df.p[rows], df.y[rows])
        at = (probe.g == key) if key else probe.g.isna()
        finite = at & probe.p.notna()
        np.testing.assert_allclose(want[finite], iso.predict(probe.p[finite]), atol=1e-12)
    assert np.isnan(want[probe.g == "zz"]).all() and np.isnan(want[probe.p.isna()]).all()

    t = upload(probe)
    joined = m.apply(t, "p")  # the mapping table goes with the query
    sql = ibis.to_sql(joined, dialect="duckdb")
    inline_sql = ibis.to_sql(m.apply(t, "p", inline=True), dialect="duckdb")
    assert len(sql) < 3000 and len(inline_sql) > 300 * len(m.table) > 10 * len(sql)
    np.testing.assert_array_equal(_values(joined), want)
    if con.name == "pyspark":  # every query is a job: the CASE and write() are tested elsewhere
        return
    np.testing.assert_array_equal(_values(m.apply(t, "p", inline=True)), want)
    name = f"iso_scale_{con.name}"
    mapping = m.write(con, name, overwrite=True)
    try:
        np.testing.assert_array_equal(_values(m.apply(t, "p", mapping=mapping)), want)
    finally:
        con.drop_table(name, force=True)


def test_buckets_cover_every_block_and_stay_small():
    """Each score's bucket (numpy's formula, as the engine computes it) lists its block, and the
    dense spot doubled the buckets rather than piling blocks into one."""
    m = sqlcal.isotonic(_rows(), score="p", label="y", by="g")
    a, b, scale, count = m._grid()
    frame = m.mapping_frame()
    g = frame[m.keys.column("g")]  # the mapping table holds the key under its internal name
    assert count & (count - 1) == 0 and count <= maps.MAX_BUCKETS
    assert frame.groupby([g.fillna("~"), "bucket"]).size().max() <= maps.BUCKET_BLOCKS + 2
    assert len(frame) < 4 * len(m.table) + 3 * count
    for key, part in frame.groupby(g.fillna("~")):
        lo = m.table.lo[m.table.g.fillna("~") == key].to_numpy()
        p = np.concatenate([lo, np.nextafter(lo, -1), np.nextafter(lo, 2), [-1.0, 2.0]])
        block = np.clip(np.searchsorted(lo, p, side="right") - 1, 0, len(lo) - 1)
        bucket = maps._bucket_numpy(p, a, b, scale, count)
        listed = set(zip(part.bucket, part.lo))
        assert all((int(k), lo[j]) in listed for k, j in zip(bucket, block))


def test_large_platt_map_joins_with_the_inline_values(upload):
    rng = np.random.default_rng(5)
    n, groups = 4000, maps.INLINE_ROWS + 6
    df = pd.DataFrame({"p": rng.uniform(0.01, 0.99, n), "g": rng.integers(0, groups, n)})
    df["y"] = (rng.random(n) < df.p).astype(np.int64)
    m = sqlcal.platt(df, score="p", label="y", by="g")
    assert len(m.table) > maps.INLINE_ROWS
    probe = df[["p", "g"]].head(300).assign(i=np.arange(300))
    probe.loc[0, "g"] = groups + 1  # a group without a map: NULL
    want = m.transform_frame(probe, "p")
    t = upload(probe)
    np.testing.assert_allclose(_values(m.apply(t, "p")), want, rtol=1e-15)
    assert np.isnan(want[0])


@pytest.mark.cluster
def test_write_takes_the_location(con, upload, tmp_path):
    m = maps.IsotonicMap(by=(), table=pd.DataFrame({"lo": [0.1, 0.4], "hi": [0.2, 0.6],
                                                    "value": [0.0, 1.0], "n": [2, 2],
                                                    "W": [2.0, 2.0]}))
    name, schema = f"iso_at_{con.name}", None
    if con.name != "pyspark":
        with pytest.raises(OptionError, match="path="):
            m.write(con, name, path=str(tmp_path))
        schema = "sqlcal_maps"
        con.raw_sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        mapping = m.write(con, name, database=schema, overwrite=True)
        assert name in con.list_tables(database=schema)
    else:  # an external Parquet table in a folder every executor sees
        mapping = m.write(con, name, path=str(tmp_path / "iso"), overwrite=True)
        assert list((tmp_path / "iso").glob("*.parquet"))
    try:
        t = upload(pd.DataFrame({"p": [0.1, 0.3, 0.9, 0.45]}))
        got = m.apply(t, "p", mapping=mapping).execute().sort_values("p")
        np.testing.assert_array_equal(got.calibrated, m.transform(got.p.to_numpy()))
    finally:
        con.drop_table(name, database=schema, force=True)
