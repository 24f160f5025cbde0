"""The errors sqlcal raises for input it cannot measure (the CLI turns each into exit code 2)."""

import contextlib
import sys
from typing import Iterator


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


class EngineDataError(InvalidInputError):
    """The engine refused the rows while computing (a value its cast cannot read, a number out of
    its range): the engine's own error, chained, under a ``ValueError``."""


@contextlib.contextmanager
def engine_data_errors() -> Iterator[None]:
    """Turn the engine's errors about the data (DuckDB's conversion, invalid-input and
    out-of-range errors, PostgreSQL's data errors) raised inside into :class:`EngineDataError`;
    anything else (a lost connection, a bug) passes unchanged."""
    try:
        yield
    except Exception as e:
        if not isinstance(e, ValueError) and is_data_error(e):
            first = next((line.strip() for line in str(e).splitlines() if line.strip()),
                         type(e).__name__)
            raise EngineDataError(f"the engine cannot compute on these rows: {first}") from e
        raise


def is_data_error(e: BaseException) -> bool:
    """Whether ``e`` is an engine's error about the values it was given (not about the query,
    the catalog, the connection or itself)."""
    kinds = []
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None:
        kinds += [getattr(duckdb, name, None) for name in (
            "ConversionException", "InvalidInputException", "OutOfRangeException")]
    for name in ("psycopg", "psycopg2"):
        driver = sys.modules.get(name)
        if driver is not None:
            kinds.append(getattr(driver, "DataError", None))
    return isinstance(e, tuple(k for k in kinds if isinstance(k, type)))


class ConfigError(ValueError):
    """A configuration file (``sqlcal report --config``, ``monitor.toml``) is invalid; nothing
    has been read or written. The message names the file, the section and the key."""


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


def check_schema(raw: dict, schema: dict, *, where: str) -> None:
    """Validate a parsed configuration against its JSON Schema (draft 2020-12); a
    :class:`ConfigError` naming the file, the key path (``[section] key``, ``[metrics]
    ece.bins``, ``[[alerts]] #2 above``) and the problem of the first error, in document
    order.

    Examples
    --------
    >>> schema = {"type": "object", "properties": {"report": {"type": "object",
    ...           "properties": {"title": {"type": "string"}}, "additionalProperties": False}}}
    >>> try:
    ...     check_schema({"report": {"title": 5}}, schema, where="r.toml")
    ... except ConfigError as e:
    ...     print(e)
    r.toml: [report] title must be a string, not 5
    """
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(raw))
    if not errors:
        return
    # the first problem in the file's order of keys, the most specific one at that place
    order = _key_order(raw)
    first = min(errors, key=lambda e: (order.get(tuple(_path(e)), len(order)), -len(e.path)))
    while first.context:  # oneOf / anyOf: the alternative that got furthest into the value
        if all(e.validator == "required" for e in first.context):  # one of these keys
            keys = [k for e in first.context for k in e.validator_value]
            raise ConfigError(f"{where}: {_shown_path(list(first.absolute_path))} needs "
                              f"{' or '.join(f'{k} =' for k in keys)} ...")
        deepest = max(len(e.absolute_path) for e in first.context)
        near = [e for e in first.context if len(e.absolute_path) == deepest]
        # a value of another type belongs to another alternative: prefer what went wrong inside
        near = [e for e in near if e.validator != "type"] or near
        if all(e.validator == "type" for e in near) and len(near) > 1:
            wanted = [t for e in near for t in ([e.validator_value] if isinstance(
                e.validator_value, str) else e.validator_value)]
            raise ConfigError(f"{where}: {_shown_path(list(near[0].absolute_path))} must be "
                              f"{' or '.join(_TYPES.get(t, t) for t in wanted)}, not "
                              f"{near[0].instance!r}")
        first = jsonschema.exceptions.best_match(near)
    raise ConfigError(f"{where}: {_describe(first)}")


def _path(error) -> list:
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in known)
        path += extra[:1]
    return path


def _key_order(raw) -> dict:
    """Each key path of ``raw`` -> its place in document order (TOML keeps the file's order)."""
    order: dict = {}

    def walk(node, prefix: tuple) -> None:
        items = (node.items() if isinstance(node, dict)
                 else enumerate(node) if isinstance(node, list) else ())
        for key, value in items:
            order[prefix + (key,)] = len(order)
            walk(value, prefix + (key,))

    walk(raw, ())
    return order


def _shown_path(path: list) -> str:
    if not path:
        return "the file"
    head, rest = path[0], path[1:]
    if head == "alerts" and rest and isinstance(rest[0], int):
        text, rest = f"[[alerts]] #{rest[0] + 1}", rest[1:]
    else:
        text = f"[{head}]"
    return text + (" " + ".".join(str(p) for p in rest) if rest else "")


_TYPES = {"string": "a string", "integer": "a whole number", "number": "a number",
          "boolean": "true or false", "object": "a table", "array": "a list", "null": "empty"}


def _describe(error) -> str:
    path = _path(error)
    where, value, kind = _shown_path(path), error.instance, error.validator
    rule = error.validator_value
    hint = error.schema.get("description")
    if kind == "additionalProperties" and path:
        known = sorted(error.schema.get("properties", {}))
        extra = sorted(k for k in value if k not in known)
        if len(path) == 1:
            return f"unknown sections {extra}; expected some of {known}"
        return (f"{_shown_path(path[:-1])} has unknown keys {extra}"
                + (f"; expected some of {known}" if known else ""))
    if kind == "required":
        missing = [k for k in rule if k not in value]
        return f"{where} needs {missing[0]} = ..."
    if kind == "type":
        wanted = [rule] if isinstance(rule, str) else list(rule)
        return f"{where} must be {' or '.join(_TYPES.get(t, t) for t in wanted)}, not {value!r}"
    if kind == "enum" and "propertyNames" in error.schema_path:  # a name, not a value
        return f"{where} has unknown names {[value]}; choose from {sorted(rule)}"
    if kind == "enum":
        return f"{where} must be one of {list(rule)}, not {value!r}"
    if kind == "const":
        return f"{where} must be {rule!r}, not {value!r}"
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        sign = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">",
                "exclusiveMaximum": "<"}[kind]
        return f"{where} must be {sign} {rule}, not {value!r}"
    if kind in ("minLength", "minItems"):
        return f"{where} must not be empty"
    if kind == "propertyNames":
        names = rule.get("enum") if isinstance(rule, dict) else None
        bad = sorted(k for k in value if names is None or k not in names)
        return (f"{where} has unknown names {bad}"
                + (f"; choose from {sorted(names)}" if names else f" ({error.message})"))
    if kind == "pattern":
        return f"{where} = {value!r} is not allowed" + (f": {hint}" if hint else
                                                         f" (it must match {rule})")
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return f"{where}: {message}" + (f" ({hint})" if hint else "")
