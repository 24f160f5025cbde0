"""The engines as CI runs them: the Spark cluster is a real one (executors in their own JVMs,
not local mode), and a PostgreSQL connection sqlcal opens from a URL gets its session settings."""

from __future__ import annotations

import importlib
import time

import pytest

from tests.conftest import POSTGRES_URL, engine_missing

source = importlib.import_module("sqlcal.inputs.sources")  # the module, not sqlcal.source()


@pytest.mark.cluster
@pytest.mark.parametrize("con", ["spark_cluster"], indirect=True)
def test_the_cluster_has_two_workers(con):
    spark = con._session
    assert spark.sparkContext.master.startswith("spark://")
    # executors registered with the driver (asynchronously after the session starts): two,
    # besides the driver itself
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    for _ in range(60):
        if status().size() == 3:
            break
        time.sleep(0.5)
    assert status().size() == 3
    # and a job's tasks ran on both (the executors' ids, through the JVM: no Python workers)
    frame = spark.range(0, 64, 1, 8).selectExpr("spark_partition_id() AS part")
    assert frame.count() == 64
    store = spark.sparkContext._jsc.sc().statusStore()
    for _ in range(60):  # the status store hears of finished tasks asynchronously
        busy = {str(e.id()) for e in _iterate(store.executorList(True))
                if str(e.id()) != "driver" and e.totalTasks() > 0}
        if len(busy) == 2:
            break
        time.sleep(0.5)
    assert len(busy) == 2


def _iterate(seq):
    """A Scala Seq as a Python list."""
    it = seq.iterator()
    out = []
    while it.hasNext():
        out.append(it.next())
    return out


def test_postgres_urls_get_the_session_settings():
    try:
        con = source._connect(POSTGRES_URL)
    except Exception as e:  # no server
        reason = f"PostgreSQL is not reachable at {POSTGRES_URL}: {type(e).__name__}"
    else:
        reason = None
    if reason:
        engine_missing(reason)

    def show(c, name):
        cur = c.raw_sql(f"SHOW {name}")
        try:
            return cur.fetchall()[0][0]
        finally:
            cur.close()

    assert show(con, "work_mem") == source.POSTGRES_SETTINGS["work_mem"]
    assert show(con, "jit") == "off"
    # a setting the URL makes itself is left alone
    url = POSTGRES_URL.replace("postgres://", "postgresql://") + "?options=-c%20work_mem%3D8MB"
    own = source._connect(url)
    try:
        assert show(own, "work_mem") == "8MB" and show(own, "jit") == "off"
    finally:
        source.connections.pop(url, None)
        own.disconnect()
