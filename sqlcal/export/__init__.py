"""Export: metric SQL, the sql/ folder and the dbt package, for other schedulers."""
