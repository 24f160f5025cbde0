{{ config(materialized="incremental", incremental_strategy="delete+insert",
          unique_key="period_start") }}
{{ sqlcal.store_manifest(ref("events"), "score", "label", "t", weight="weight", by=["segment"],
                         cells=1024, as_of="2026-12-10 00:00:00") }}
