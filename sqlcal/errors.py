"""The errors sqlcal raises for input it cannot measure (the CLI turns each into exit code 2)."""


class InvalidInputError(ValueError):
    """The data cannot be measured as given: a column is missing, mistyped, or has bad rows."""
