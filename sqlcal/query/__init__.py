"""The query layer: summaries declared once with their merge rules (:mod:`.declared`), and the
planner that runs the ones a set of metrics needs in the fewest scans (:mod:`.planner`). The Ibis
reductions themselves are in :mod:`sqlcal.query.reductions`."""
