"""The errors sqlcal raises for input it cannot measure (the CLI turns each into exit code 2),
and the one redaction of passwords in what sqlcal shows (:func:`redact`)."""

import contextlib
import re
import sys
from typing import Iterator


class InvalidInputError(ValueError):
    """The data cannot be measured as given: a column is missing, mistyped, or has bad rows.

    A subclass of ``ValueError``; the message names the column, the problem, the count of rows
    and what to pass instead.

    See Also
    --------
    source : validates the data once and raises this error.
    multiclass : checks multiclass predictions and raises it for bad examples.

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
    out-of-range errors, PostgreSQL's data errors, Spark's cast and arithmetic errors) raised
    inside into :class:`EngineDataError`; anything else (a lost connection, a bug) passes
    unchanged."""
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
    spark = sys.modules.get("pyspark.errors")
    if spark is not None:  # ANSI mode (Spark 4's default) raises on a value it cannot cast
        kinds += [getattr(spark, name, None) for name in (
            "NumberFormatException", "ArithmeticException", "DateTimeException")]
    return isinstance(e, tuple(k for k in kinds if isinstance(k, type)))


class ConfigError(ValueError):
    """A configuration file (``sqlcal report --config``, ``monitor.toml``) is invalid; nothing
    has been read or written. The message names the file, the section and the key."""


class StoreError(ValueError):
    """The store holds tables sqlcal did not write, or written for another layout, or its path
    cannot be a store (a FIFO, a folder, the source's database)."""


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

# -- secrets ----------------------------------------------------------------------------------

#: what stands in for a password in every text sqlcal shows, logs, stores or raises
HIDDEN = "***"
#: a URL's start (``scheme://``); its userinfo is read up to the last ``@`` before the host
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
#: where a URL written inside a sentence ends: white space or a quote
_URL_END = re.compile(r"[\s'\"`<>]")
#: a password given as a key: in a URL's query string or a JDBC property (``?password=...&``,
#: ``;password=...``) the value ends at the next separator; in a libpq key=value connection
#: string (``host=db password='a b'``) at white space, or it is quoted
_KEYED = re.compile(r"(?i)(?P<key>[?&;]\s*(?:ssl)?(?:password|passwd|pwd)\s*=)[^&;#\s]*"
                    r"|(?P<dsn>\b(?:ssl)?(?:password|passwd|pwd)\s*=\s*)"
                    r"(?:'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|\S*)")
#: the passwords redact() has met, hidden wherever they appear later, in any encoding (an
#: engine's message may quote a connection string in a shape the patterns do not know); those
#: of at least 4 characters, so that a short password does not hide every word it spells
_SEEN: set[str] = set()


def redact(text):
    """``text`` with every password in it replaced by ``***``.

    One redaction for everything sqlcal prints, logs, raises, stores or renders: a connection
    URL (``postgres://user:pw@host/db``), a message quoting one, or a configuration (a dict or
    list: every string in it). A URL's userinfo ends at the *last* ``@`` before its host, so a
    password holding ``@``, ``:`` or ``/`` (raw or percent-encoded) is hidden whole; a
    ``password=`` key (a URL's query string, a libpq ``key=value`` string, a JDBC property) is
    hidden too; and so is any password of a URL passed here before, in any of its encodings,
    wherever it appears. Anything that is not text is returned as it is.

    Parameters
    ----------
    text : str, dict, list or any
        What to show.

    Returns
    -------
    str, dict, list or any
        The same shape, with the passwords replaced.

    Examples
    --------
    >>> redact("postgres://bob:p@ss:w/rd@db:5432/x?sslmode=require")
    'postgres://bob:***@db:5432/x?sslmode=require'
    >>> redact("table 't' is not in postgres://bob:s%40cret@db/x; its tables are []")
    "table 't' is not in postgres://bob:***@db/x; its tables are []"
    >>> redact("host=db user=bob password='a b' dbname=x")
    'host=db user=bob password=*** dbname=x'
    >>> redact({"data": "postgres://bob:hunter22@db/x", "bins": 15})
    {'data': 'postgres://bob:***@db/x', 'bins': 15}
    """
    if isinstance(text, dict):
        return {k: redact(v) for k, v in text.items()}
    if type(text) in (list, tuple):
        return type(text)(redact(v) for v in text)
    if not isinstance(text, str):
        return text
    out, start = [], 0
    for found in _URL.finditer(text):
        if found.start() < start:  # inside a URL already read (a URL in a query string)
            continue
        head = found.end()
        end = _URL_END.search(text, head)
        end = len(text) if end is None else end.start()
        out.append(text[start:head] + _redact_authority(text[head:end], found.group(0)))
        start = end
    text = "".join(out) + text[start:]
    text = _KEYED.sub(_hide_keyed, text)
    for secret in sorted(_SEEN, key=len, reverse=True):
        for form in _encodings(secret):
            text = text.replace(form, HIDDEN)
    return text


def _redact_authority(rest: str, scheme: str) -> str:
    """A URL after its ``scheme://`` with the password of its userinfo hidden (and remembered)."""
    # the userinfo ends at the last "@" before the query, which may hold an "@" of its own
    # (application_name=me@host); with no "@" before the first "?", that "?" is the password's
    query = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, query)
    if at < 0:
        at = rest.rfind("@")
    if at < 0:
        return rest
    user, colon, password = rest[:at].partition(":")
    if not colon:  # a user name alone: nothing secret
        return rest
    if not any(password in shown for shown in (scheme, user, rest[at:])):
        _remember(password)  # not a password the URL shows anyway (postgres://postgres:postgres@)
    return f"{user}:{HIDDEN}{rest[at:]}"


def _hide_keyed(found: re.Match) -> str:
    key = found["key"] or found["dsn"]
    value = found.group(0)[len(key):]
    if value[:1] in ("'", '"'):  # a quoted libpq value: its quotes and backslash escapes
        value = re.sub(r"\\(.)", r"\1", value[1:-1] if value[-1:] == value[:1] else value[1:])
    _remember(value)
    return key + HIDDEN


def _remember(password: str) -> None:
    from urllib.parse import unquote

    if password and password != HIDDEN:
        for form in (password, unquote(password)):
            if len(form) >= 4:
                _SEEN.add(form)


def _encodings(secret: str) -> set[str]:
    from urllib.parse import quote, quote_plus

    return {secret, quote(secret, safe=""), quote_plus(secret), quote(secret)} - {""}
