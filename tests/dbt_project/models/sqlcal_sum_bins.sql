{{ config(materialized="incremental", incremental_strategy="delete+insert",
          unique_key="period_start") }}
{{ sqlcal.store_rows("bins", ref("events"), "score", "label", "t", weight="weight",
                     by=["segment"], cells=1024) }}
