{{ sqlcal.store_manifest(ref("drift_rows"), "score", "label", "t", weight="weight",
                         by=["segment"], cells=1024, as_of="2027-01-15 00:00:00") }}
