"""The errors sqlcal raises for input it cannot measure (the CLI turns each into exit code 2),
and the one redaction of passwords in what sqlcal shows (:func:`redact`)."""

import re


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
