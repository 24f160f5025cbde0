"""Inputs: what to measure (the Source and its normalised rows, where= conditions,
multiclass layouts, group keys, bin edges). Builds Ibis expressions; runs no query."""
