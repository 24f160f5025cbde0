"""The one writer of every file sqlcal writes: outputs never destroy data.

An output path is refused when it is a symlink, a directory or anything else that is not a regular
file (a FIFO, a device, a socket: refused before it is opened), when it is one of the files the
report reads (its source file, any file a glob or folder source matches, a path inside a folder
source), when it holds a database or data file (DuckDB, SQLite, Parquet, Arrow, ORC, Avro,
compressed), and when it is any other existing file that is not a previous sqlcal output of the
same kind. sqlcal marks its outputs: JSON with the top-level field ``"generator": "sqlcal"``, HTML
with ``<meta name="generator" content="sqlcal">``. A file is written in a temporary folder beside
it (``.NAME.sqlcal-XXXXXXXX.partial``), flushed to disk, then renamed over the path in one step
(``os.replace``), so a reader sees the old file or the new one, never half of one; on failure the
temporary folder is removed and the old file is untouched. The writer holds a lock
(``flock``) on its temporary folder while it writes; a writer killed before the rename leaves the
folder unlocked, and the next write into that folder removes it (never one still locked, never a
name sqlcal does not make).

:func:`check` is called when a configuration is validated or the command's flags are parsed,
before any query; :func:`write_text` checks again and writes.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob
import json
import os
import re
import shutil
import stat
import tempfile
from typing import Any, Iterable, Iterator

try:
    import fcntl
except ImportError:  # Windows: no flock, and no removal of a killed writer's temporary folder
    fcntl = None

#: the marker of a JSON output (a top-level field) and of an HTML output (in <head>)
JSON_MARKER = ("generator", "sqlcal")
HTML_MARKER = '<meta name="generator" content="sqlcal">'
KINDS = ("json", "html")

# leading bytes of files that hold data: a report never replaces one, whatever its name
_MAGIC = (
    (8, b"DUCK", "a DuckDB database"),
    (0, b"SQLite format 3\x00", "an SQLite database"),
    (0, b"PAR1", "a Parquet file"),
    (0, b"ARROW1", "an Arrow file"),
    (0, b"ORC", "an ORC file"),
    (0, b"Obj\x01", "an Avro file"),
    (0, b"\x1f\x8b", "a gzip file"),
    (0, b"PK\x03\x04", "a zip file"),
    (0, b"\x28\xb5\x2f\xfd", "a zstd file"),
)
_DB_SUFFIXES = (".duckdb", ".ddb", ".db")
_JSON_PARSE_LIMIT = 64 * 2**20  # bytes
#: the temporary folders of :func:`replacing` (tempfile.mkdtemp's 8 random characters)
_PARTIAL = re.compile(r"\..+\.sqlcal-[a-z0-9_]{8}\.partial")


class OutputError(ValueError):
    """An output path sqlcal will not write; nothing has been read or written."""


def check(path: str | os.PathLike, kind: str, *, sources: Iterable[str] = ()) -> str:
    """Refuse an output path that could destroy data; return it as an absolute path.

    Parameters
    ----------
    path : str or path-like
        Where the output goes (relative to the current folder).
    kind : {"json", "html"}
        What is written: an existing file there must be a previous sqlcal output of this kind.
    sources : iterable of str
        What the report reads, as :func:`protected` returns it: files, and ``glob:`` patterns and
        ``dir:`` folders whose files are inputs.

    Returns
    -------
    str
        The absolute path.

    Raises
    ------
    OutputError
        Naming the path and why: a symlink, a directory, an input of the report, a database or
        data file, or another file than a previous sqlcal output of ``kind``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}; expected one of {KINDS}")
    path = os.path.abspath(os.fspath(path))
    shown = f"{kind} output {os.fspath(path)!r}"
    if os.path.islink(path):
        raise OutputError(f"{shown} is a symlink; sqlcal writes only regular files it owns: "
                          "pass the real path or another one")
    if os.path.isdir(path):
        raise OutputError(f"{shown} is a directory; pass a file path such as "
                          f"{os.path.join(path, 'report.' + kind)!r}")
    if os.path.lexists(path) and not _regular(path):
        raise OutputError(f"{shown} is not a regular file ({_file_type(path)}); sqlcal writes "
                          "only regular files it owns: choose another path")
    reason = _reads(path, sources)
    if reason:
        raise OutputError(f"{shown} {reason}; the report never writes over its input: "
                          "choose another path")
    parent = _existing_ancestor(os.path.dirname(path))
    if not os.path.isdir(parent):
        raise OutputError(f"{shown}: {parent!r} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{shown}: the folder {parent!r} is not writable")
    if os.path.lexists(path):
        holds = data_kind(path)
        if holds:
            raise OutputError(f"{shown} is {holds}; sqlcal never writes over data: choose "
                              "another path")
        if not is_output(path, kind):
            raise OutputError(
                f"{shown} exists and is not a previous sqlcal {kind} output (no "
                f"{_marker_text(kind)}); sqlcal replaces only its own outputs: delete it or "
                "choose another path")
    return path


def check_all(paths: dict[str, Any], *, sources: Iterable[str] = ()) -> dict[str, str]:
    """:func:`check` each ``{kind: path}`` (None skipped) and refuse two outputs on one path."""
    sources = list(sources)
    checked = {kind: check(p, kind, sources=sources) for kind, p in paths.items() if p}
    seen: dict[str, str] = {}
    for kind, path in checked.items():
        real = os.path.realpath(path)
        if real in seen:
            raise OutputError(f"the {seen[real]} and {kind} outputs are both {path!r}; give "
                              "each its own path")
        seen[real] = kind
    return checked


def write_text(path: str | os.PathLike, kind: str, text: str, *,
               sources: Iterable[str] = ()) -> str:
    """Check ``path`` (:func:`check`) and replace it atomically with ``text`` (UTF-8).

    Missing parent folders are created. Returns the absolute path.
    """
    path = check(path, kind, sources=sources)
    if kind == "json" and not _has_json_marker(text):
        raise ValueError(f"the JSON for {path!r} lacks the top-level generator field")
    if kind == "html" and HTML_MARKER not in text[:4096]:
        raise ValueError(f"the HTML for {path!r} lacks {HTML_MARKER}")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with replacing(path) as partial:
            with open(partial, "x", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
    except OSError as e:  # a full disk, a folder made read-only meanwhile: the old file stays
        raise OutputError(f"cannot write the {kind} output {path!r}: "
                          f"{e.strerror or e}; the previous file, if any, is unchanged") from e
    return path


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    The temporary path does not exist when yielded (the body creates it: a text file, a DuckDB
    database); it lies in a folder ``.NAME.sqlcal-XXXXXXXX.partial`` next to ``path``, locked
    while the body runs. On any exception the folder is removed and ``path`` is left as it was;
    a kill leaves the folder unlocked, and the next :func:`replacing` in the same folder removes
    it (:func:`remove_stale`). Permissions follow the umask, as for a new file.
    """
    folder = os.path.dirname(os.path.abspath(path))
    remove_stale(folder)
    partial, lock = _locked_folder(folder, os.path.basename(path))
    try:
        inner = os.path.join(partial, os.path.basename(path))
        yield inner
        os.replace(inner, path)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
        os.close(lock)
    with contextlib.suppress(OSError):  # the rename itself survives a crash once the folder syncs
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_stale(folder: str) -> list[str]:
    """Remove the temporary folders of :func:`replacing` in ``folder`` that no process holds (a
    writer killed before its rename); return their paths.

    Only names sqlcal makes (``.NAME.sqlcal-XXXXXXXX.partial``, folders) are looked at, and only
    those whose lock is free are removed: a writer still running keeps its own. Without ``flock``
    (Windows) nothing is removed.
    """
    removed = []
    if fcntl is None:
        return removed
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not (_PARTIAL.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a writer is at work
            os.close(fd)
            continue
        try:
            # still the folder we locked (not removed and remade meanwhile)
            if os.stat(entry.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _locked_folder(folder: str, name: str) -> tuple[str, int]:
    """A new temporary folder for ``name`` in ``folder`` and the open, locked descriptor that
    marks it as in use (a cleaner that took it first makes us try again)."""
    while True:
        partial = tempfile.mkdtemp(dir=folder, prefix=f".{name[:100]}.sqlcal-",
                                   suffix=".partial")
        if fcntl is None:
            return partial, os.open(os.devnull, os.O_RDONLY)  # a descriptor to close, no lock
        fd = os.open(partial, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a cleaner holds it
        try:
            if os.stat(partial, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return partial, fd
        except FileNotFoundError:
            pass
        os.close(fd)  # a cleaner removed it between mkdtemp and flock


def protected(data: Any, *more: Any) -> list[str]:
    """What a source reads, for :func:`check`: a file path, a ``glob:`` pattern or a ``dir:``
    folder for each of ``data`` and ``more`` that names local files (URLs other than
    ``duckdb://`` and in-memory data name none)."""
    out = []
    for item in (data, *more):
        if isinstance(item, os.PathLike):
            item = os.fspath(item)
        if not isinstance(item, str) or not item:
            continue
        if item.startswith("duckdb://"):
            item = item[len("duckdb://"):]
        elif "://" in item:
            continue
        if item in ("", ":memory:"):
            continue
        if any(ch in item for ch in "*?["):
            out.append("glob:" + os.path.abspath(item))
        elif os.path.isdir(item):
            out.append("dir:" + os.path.realpath(item))
        else:
            out.append(os.path.realpath(item))
            if item.lower().endswith(_DB_SUFFIXES):
                out.append(os.path.realpath(item) + ".wal")
    return out


def data_kind(path: str) -> str | None:
    """What data a file holds, by its leading bytes ("a DuckDB database", ...), or None."""
    try:
        with _open_regular(path) as f:
            head = f.read(32)
    except OSError:
        return None
    for offset, magic, name in _MAGIC:
        if head[offset:offset + len(magic)] == magic:
            return name
    return None


def is_output(path: str, kind: str) -> bool:
    """Whether ``path`` is a regular file sqlcal wrote as a ``kind`` output (by its marker)."""
    try:
        f = _open_regular(path)
    except OSError:  # absent, a symlink, a FIFO, a folder
        return False
    with f:
        if kind == "html":
            return HTML_MARKER.encode() in f.read(4096)
        head = f.read(4096)
        # sqlcal writes the marker first; a reformatted file of reasonable size is parsed
        if re.match(rb'\s*\{\s*"generator"\s*:\s*"sqlcal"', head):
            return True
        if os.fstat(f.fileno()).st_size > _JSON_PARSE_LIMIT:
            return False
        text = head + f.read()
    try:
        return _has_json_marker(text.decode("utf-8"))
    except UnicodeDecodeError:
        return False


def _has_json_marker(text: str) -> bool:
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get(JSON_MARKER[0]) == JSON_MARKER[1]


def _marker_text(kind: str) -> str:
    return HTML_MARKER if kind == "html" else f'top-level "{JSON_MARKER[0]}": "{JSON_MARKER[1]}"'


def _reads(path: str, sources: Iterable[str]) -> str | None:
    real = os.path.realpath(path)
    for item in sources:
        if item.startswith("glob:"):
            pattern = item[len("glob:"):]
            matched = {os.path.realpath(m) for m in glob.glob(pattern, recursive=True)}
            if real in matched or fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(real, pattern):
                return f"matches the source pattern {pattern!r}"
        elif item.startswith("dir:"):
            folder = item[len("dir:"):]
            if real == folder or real.startswith(folder.rstrip(os.sep) + os.sep):
                return f"is inside the source folder {folder!r}"
        elif real == item or _same_file(path, item):  # the same file by another name
            return "is a file the report reads"
    return None


def _open_regular(path: str):
    """``path`` opened for binary reading, when it is a regular file (not through a symlink, and
    without blocking on a FIFO); else an OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return os.fdopen(fd, "rb")


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _file_type(path: str) -> str:
    mode = os.lstat(path).st_mode
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a file"


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # either is absent
        return False


def _existing_ancestor(folder: str) -> str:
    while folder and not os.path.lexists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return folder
