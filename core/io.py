"""Files: where things live (assets, the user cache), model slugs, and atomic writes.

Every file the project writes goes through :func:`atomic_write`: the bytes land in a uniquely named temporary
file in the target's folder, which is then renamed over the target, so a reader never sees half a file and
two writers never collide on a temporary name. The file gets the user's usual permissions (umask), not the
0600 of ``mkstemp``.

Files a user names are read through :func:`read_user_file` / :func:`read_user_text` (regular files only, a
byte cap, no blocking on a pipe); JSON a user sends is measured with :func:`json_depth` before it is parsed
(:func:`check_json_depth`: no recursion error on a document nested thousands deep); output locations are
checked up front with :func:`check_output_path`; CSV exports go through :func:`csv_safe_text` so a spreadsheet
never runs a cell as a formula.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout's root folder (``app.py``, ``assets/``, ``pages/`` …)."""

ASSETS = REPO_ROOT / "assets"
"""Bundled data: examples, calibration and probe sets, precomputed per-model files."""

EMBEDDED_SLUG = "embedded"


def asset_path(*parts: str) -> Path:
    """A path inside ``assets/``, e.g. ``asset_path("crm", "embedded-chat.npz")``."""
    return ASSETS.joinpath(*parts)


def package_folder(package: str) -> Path | None:
    """The folder of an installed data package, located without importing it (``None`` when not installed).

    The bundled model packages are found this way because importing them would pull in dependencies the app
    does not install (docs/architecture.md, "The embedded model").
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def package_files(
    package: str, files: Sequence[str], *, under: str = "", error: type[Exception], install: str, reinstall: str
) -> Path:
    """The folder ``under`` of the installed ``package`` (:func:`package_folder`), holding every one of ``files``.

    Raises:
        error: the package is not installed (the message is ``install``) or one of ``files`` is missing (the
            message names it and says ``reinstall``).
    """
    installed = package_folder(package)
    if installed is None:
        raise error(install)
    folder = installed / under if under else installed
    for name in files:
        if not (folder / name).is_file():
            raise error(f"{name} is missing from {folder}; {reinstall}.")
    return folder


def cache_dir() -> Path:
    """The user cache folder (``$READ_OR_RECALL_CACHE`` or ``$XDG_CACHE_HOME/read-or-recall``)."""
    env = os.environ.get("READ_OR_RECALL_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "read-or-recall"


def model_slug(name: str, source: str, *, embedded: bool = False) -> str:
    """A file-name-safe key for one model, used by every per-model cache file.

    ``embedded`` for the embedded model; otherwise the sanitised name (≤ 60 characters) plus the first 10
    hex digits of ``sha1(name | source)``, so two models with the same display name never share a file.
    """
    if embedded:
        return EMBEDDED_SLUG
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:60] or "model"
    digest = hashlib.sha1(f"{name}|{source}".encode()).hexdigest()[:10]
    return f"{safe}-{digest}"


def _umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write a file atomically: ``write(fh)`` fills a unique temporary file that then replaces ``path``.

    Args:
        path: the target; its folder is created when missing.
        write: called with the temporary file opened for binary writing.

    Returns:
        The target path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_npz(path: str | Path, arrays: dict[str, Any]) -> Path:
    """Write ``arrays`` (name → array) as a compressed NPZ atomically; read it back with ``allow_pickle=False``."""
    import numpy as np

    return atomic_write(path, lambda fh: np.savez_compressed(fh, **arrays))


def atomic_write_json(path: str | Path, data: Any, *, indent: int | None = 2) -> Path:
    """Write ``data`` as strict JSON (no NaN), UTF-8, with a final newline, atomically."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    return atomic_write_text(path, text)


# ----------------------------------------------------------------------------------------------------------
# Reading files a user names, checking where output goes, and exporting CSV safely

KiB = 1024
MiB = 1024 * 1024


class UserFileError(ValueError):
    """A file a user named cannot be used: missing, not a regular file, too large, or unreadable."""


def format_size(n_bytes: int) -> str:
    """A byte count in the binary unit it is computed in: ``"20 MiB"``, ``"64 KiB"``, ``"1.5 MiB"``, ``"12 bytes"``."""
    for unit, size in (("MiB", MiB), ("KiB", KiB)):
        if n_bytes >= size:
            value = n_bytes / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n_bytes} byte" + ("" if n_bytes == 1 else "s")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_user_file(path: str | Path, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a file a user named (a CSV, a threshold or a report JSON), read safely.

    Only regular files are accepted: a folder, a device (``/dev/zero``), a named pipe or a socket is refused
    with a message, never read. The file is opened without blocking (a pipe cannot hang the open), checked
    with ``fstat`` on the open descriptor (no race between the check and the read), and read with a cap: at
    most ``max_bytes + 1`` bytes, so a file that grows while it is read, or whose ``st_size`` is wrong, still
    cannot exhaust memory.

    Args:
        path: the file.
        max_bytes: the largest accepted size in bytes.
        what: how messages name the file (e.g. ``"threshold file"``).

    Raises:
        UserFileError: (a ``ValueError``) the file is missing, not a regular file, over ``max_bytes`` or
            cannot be read; the message names it and says why.
    """
    shown = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UserFileError(f"The {what} {shown} does not exist.") from None
    except PermissionError:
        raise UserFileError(f"The {what} {shown} cannot be read (permission denied).") from None
    except OSError as exc:
        raise UserFileError(f"The {what} {shown} cannot be opened: {exc.strerror or exc}.") from None
    except ValueError:  # e.g. an embedded NUL character in the name
        raise UserFileError(f"The {what} name {shown!r} is not a valid path.") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserFileError(f"The {what} {shown} is {_kind(info.st_mode)}, not a regular file.")
        limit = f"the limit is {format_size(max_bytes)}"
        if info.st_size > max_bytes:
            raise UserFileError(f"The {what} {shown} is {format_size(info.st_size)}; {limit}.")
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, MiB))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise UserFileError(f"The {what} {shown} cannot be read: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise UserFileError(f"The {what} {shown} is over {format_size(max_bytes)}; {limit}.")
    return data


def read_user_text(path: str | Path, max_bytes: int, what: str = "file") -> str:
    """:func:`read_user_file` decoded as UTF-8 text (a leading byte-order mark is dropped).

    Raises:
        UserFileError: see :func:`read_user_file`, or the bytes are not UTF-8 (the message gives the byte).
    """
    data = read_user_file(path, max_bytes, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserFileError(f"The {what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None


MAX_JSON_DEPTH = 64
"""Deepest nesting of objects and arrays accepted in a JSON document a user sends (a threshold file, a request
body): real documents here nest a few levels; thousands of levels exhaust the parser's recursion."""
_JSON_TOKEN = re.compile(r'\\.|["\[\]{}]', re.DOTALL)


def json_depth(text: str, stop_above: int | None = None) -> int:
    """How deep objects and arrays nest in the JSON ``text`` (0 for a bare value; brackets inside strings do not
    count), without parsing it — so a document nested thousands of levels deep is measured, not recursed into.

    One linear scan over the quotes, escapes and brackets of ``text``. Malformed JSON gets a depth too (the
    parser then says what is wrong).

    Args:
        stop_above: only ask whether the depth exceeds this value: the scan stops as soon as it does (the answer
            is then ``stop_above + 1``), and any answer ``<= stop_above`` just means "not deeper".
    """
    if stop_above is not None and text.count("[") + text.count("{") <= stop_above:
        return stop_above  # cannot nest deeper than it has brackets (an upper bound is all the caller asks)
    depth = deepest = 0
    in_string = False
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token == '"':
            in_string = not in_string
        elif in_string or len(token) > 1:
            continue
        elif token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    return deepest
        else:
            depth = max(depth - 1, 0)
    return deepest


def check_json_depth(text: str, max_depth: int = MAX_JSON_DEPTH, what: str = "The JSON document") -> None:
    """Refuse JSON nested deeper than ``max_depth`` before it is parsed (:func:`json_depth`).

    Raises:
        ValueError: ``"<what> nests objects or arrays more than 64 levels deep"``.
    """
    if json_depth(text, stop_above=max_depth) > max_depth:
        raise ValueError(f"{what} nests objects or arrays more than {max_depth} levels deep (refused unparsed).")


def check_output_path(path: str | Path, what: str = "output file") -> Path:
    """Check, before any work, that a file can be written at ``path`` (it is written later, atomically).

    The target must not be a folder or a special file; the nearest existing folder above it must be a folder
    (not a regular file: ``result.json/out.json``) and writable, because :func:`atomic_write` creates the
    missing folders and a temporary file there.

    Returns:
        ``path`` as a :class:`Path`.

    Raises:
        UserFileError: the file could not be written there; the message says why.
    """
    text = str(path)
    if not text.strip():
        raise UserFileError(f"The {what} is empty: give a file name.")
    if "\0" in text:
        raise UserFileError(f"The {what} name {text!r} is not a valid path.")
    target = Path(path)
    try:
        info = target.stat()
    except OSError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise UserFileError(f"The {what} {text} is {_kind(info.st_mode)}; give a file name.")
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UserFileError(f"The {what} {text} cannot be created: {folder} is a file, not a folder.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserFileError(f"The {what} {text} cannot be written: the folder {folder} is not writable.")
    return target


CSV_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""A spreadsheet reads a cell that starts with one of these as a formula (CSV injection)."""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def csv_safe_cell(value: Any) -> Any:
    """A CSV cell that a spreadsheet will not run as a formula.

    Text starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading apostrophe (the
    usual neutralization); anything that is not text, and text that reads as a number (``-1.5``, ``-inf``), is
    returned unchanged, so numbers stay numbers.
    """
    if isinstance(value, str) and value.startswith(CSV_FORMULA_PREFIXES) and not _is_number(value):
        return "'" + value
    return value


def csv_safe_text(text: str) -> str:
    """CSV text with every cell passed through :func:`csv_safe_cell` (the text is returned unchanged when no
    cell needs it; otherwise it is rewritten with the same line ending and minimal quoting)."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    safe = [[csv_safe_cell(cell) for cell in row] for row in rows]
    if safe == rows:
        return text
    buf = io.StringIO(newline="")
    csv.writer(buf, lineterminator="\r\n" if "\r\n" in text else "\n").writerows(safe)
    return buf.getvalue()


class AsDict:
    """A mixin for a dataclass whose JSON form is :func:`dataclasses.asdict`: :meth:`to_dict`, written once."""

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)  # type: ignore[call-overload]


class JsonRecord(AsDict):
    """A mixin for a dataclass stored as one versioned JSON object (a fitted detector's coefficients, a choice
    of heads): :meth:`to_dict` / :meth:`from_dict` / :meth:`load` / :meth:`save`, written once.

    The dataclass has a ``version: int`` field and sets two class attributes: ``KIND``, the words its errors use
    (``"combined model"``), and ``VERSION``, the version this code reads. Unknown keys of a file are ignored;
    a missing field, a wrong version or unreadable JSON is a ``ValueError`` naming the kind.
    """

    KIND = "record"
    VERSION = 1

    @classmethod
    def from_dict(cls, data: Any) -> Any:
        """A record from its JSON object (``ValueError`` naming what is wrong)."""
        if not isinstance(data, dict):
            raise ValueError(f"a {cls.KIND} file holds one JSON object")
        if int(data.get("version", 0)) != cls.VERSION:
            raise ValueError(f"{cls.KIND} version {data.get('version')} (this code reads {cls.VERSION})")
        known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError as exc:
            raise ValueError(f"{cls.KIND} file: {exc}") from exc

    @classmethod
    def load(cls, path: str | Path) -> Any:
        """The record in the JSON file ``path``."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read {cls.KIND} {path}: {exc}") from exc
        return cls.from_dict(data)

    def save(self, path: str | Path) -> Path:
        """Write the record atomically; returns ``path``."""
        return atomic_write_json(path, self.to_dict())
