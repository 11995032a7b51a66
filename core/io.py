"""Files: where things live (assets, the user cache), model slugs, and atomic writes.

Every file the project writes goes through :func:`atomic_write`: the bytes land in a uniquely named temporary
file in the target's folder, which is then renamed over the target, so a reader never sees half a file and
two writers never collide on a temporary name. The file gets the user's usual permissions (umask), not the
0600 of ``mkstemp``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import tempfile
from collections.abc import Callable
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
    does not install (see DESIGN.md §3).
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


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


def atomic_write_json(path: str | Path, data: Any, *, indent: int | None = 2) -> Path:
    """Write ``data`` as strict JSON (no NaN), UTF-8, with a final newline, atomically."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    return atomic_write_text(path, text)
