"""The errors sqlcal raises for input it cannot measure (the CLI turns each into exit code 2)."""


class InvalidInputError(ValueError):
    """The data cannot be measured as given: a column is missing, mistyped, or has bad rows.

    A subclass of ``ValueError``; the message names the column, the problem, the count of rows
    and what to pass instead.

    Examples
    --------
    >>> import pandas as pd, sqlcal
    >>> bad = pd.DataFrame({"p": [0.1, 1.5], "y": [0, 1]})
    >>> try:
    ...     sqlcal.ece(bad, score="p", label="y")
    ... except sqlcal.InvalidInputError as e:
    ...     print(e)  # doctest: +ELLIPSIS
    score column 'p' has 1 rows outside [0, 1]. Clean them, or pass on_invalid='drop' ...
    """


class ConfigError(ValueError):
    """A configuration file (``sqlcal report --config``, ``monitor.toml``) is invalid; nothing
    has been read or written. The message names the file, the section and the key."""


def install_hint(extra: str) -> str:
    """How to install one of sqlcal's extras: sqlcal is installed from its repository, so the
    hint names the repository's checkout, not a package index."""
    return f"pip install '.[{extra}]' in sqlcal's repository"


def read_toml(path) -> dict:
    """The table of a TOML file; a :class:`ConfigError` naming the file when it is not TOML."""
    import os

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{os.fspath(path)} is not valid TOML: {e}") from None
