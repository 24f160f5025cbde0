"""Monitoring over time: summaries stored once per period (:mod:`sqlcal.monitor.schema`,
:mod:`sqlcal.monitor.store`), windows merged from them (:mod:`sqlcal.monitor.stored`), label
maturity (:mod:`sqlcal.monitor.maturity`) and change detection."""
