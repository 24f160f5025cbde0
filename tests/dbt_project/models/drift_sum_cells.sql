{{ sqlcal.store_rows("cells", ref("drift_rows"), "score", "label", "t", weight="weight",
                     by=["segment"], cells=1024) }}
