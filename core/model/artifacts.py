"""The one artifact store: where a model's calibrated files live and how a model finds its own.

Every per-model file the project reads — a CRM basis, RADAR's feature table, the combined detector, the
per-detector thresholds, the audit calibration — is one :class:`ArtifactKind`: where it ships in ``assets/``
(*bundled*: for the embedded model only, or for any model by its slug), where a computed one is cached
(``core.io.cache_dir()/...``, by :attr:`core.model.handle.ModelHandle.slug`), how to read it and how to tell
whether a stored one fits this model (*fresh*). :func:`find` does the lookup once for all of them: the bundled
file first, then the cache; an unreadable file or one made for another model, template or version is skipped
with a log line; a read file is kept in memory per (path, modification time) under one lock, so the app reads
each file once and a rewritten file is read again. "Is this the embedded model?" is asked one way,
:attr:`core.model.handle.ModelInfo.is_embedded`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from core.io import asset_path, cache_dir
from core.model.handle import ModelHandle

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_MEMO = 32
"""Files kept in memory, across kinds (least recently used dropped first)."""

_MEMO: OrderedDict[tuple[str, str, float], Any] = OrderedDict()
_LOCK = threading.Lock()

UNREADABLE = (OSError, ValueError, KeyError)
"""What a reader may raise for a file that cannot be used (skipped with a warning, never raised by :func:`find`)."""


@dataclass(frozen=True)
class ArtifactKind(Generic[T]):
    """One kind of per-model file.

    Attributes:
        name: a short name for logs and the memo (``"crm-basis"``).
        read: ``read(path) -> value``; raises one of :data:`UNREADABLE` for a file that cannot be used.
        cache: ``cache(slug, variant) -> path`` relative to :func:`core.io.cache_dir`, or ``None`` (bundled only).
        bundled: ``bundled(slug, variant) -> path`` in ``assets/``, or ``None`` (cache only).
        bundled_embedded_only: the bundled file exists for the embedded model only (else for any slug).
        fresh: ``fresh(value, handle, variant) -> None`` when the stored value fits this model, else the reason
            it does not (another model, template, shape or version); ``None`` accepts every readable file.
        memo: keep read values in memory per (path, modification time).
    """

    name: str
    read: Callable[[Path], T]
    cache: Callable[[str, str], Path] | None = None
    bundled: Callable[[str, str], Path] | None = None
    bundled_embedded_only: bool = True
    fresh: Callable[[T, ModelHandle, str], str | None] | None = None
    memo: bool = True


def made_for(value: Any, handle: ModelHandle, variant: str) -> str | None:
    """The freshness check of a record stored per (model, template): ``None`` when its ``model`` and ``template``
    name this model and ``variant`` and, where the record has ``n_layers`` / ``n_heads``, they are the model's;
    else what it was made for."""
    if value.model != handle.info.name or value.template != variant:
        return f"made for {value.model!r} / {value.template!r}"
    shape = (getattr(value, "n_layers", None), getattr(value, "n_heads", None))
    if shape != (None, None) and shape != (handle.info.n_layers, handle.info.n_heads):
        return f"made for {shape[0]} layers × {shape[1]} heads"
    return None


def per_template(name: str, read: Callable[[Path], T], folder: str) -> ArtifactKind[T]:
    """A JSON record kind stored per (model, resolved template), checked by :func:`made_for`: bundled for the
    embedded model as ``assets/<folder>/embedded-<template>.json``, cached as ``<folder>/<slug>/<template>.json``."""
    return ArtifactKind(
        name=name,
        read=read,
        bundled=lambda slug, key: asset_path(folder, f"embedded-{key}.json"),
        cache=lambda slug, key: Path(folder) / slug / f"{key}.json",
        fresh=made_for,
    )


def cache_path(kind: ArtifactKind[Any], handle: ModelHandle, variant: str = "") -> Path:
    """Where a computed file of ``kind`` for ``handle``'s model (and ``variant``, e.g. a template) is cached.

    Raises:
        ValueError: ``kind`` has no cache location.
    """
    if kind.cache is None:
        raise ValueError(f"{kind.name} files are bundled only")
    return cache_dir() / kind.cache(handle.slug, variant)


def candidates(kind: ArtifactKind[Any], handle: ModelHandle, variant: str = "") -> list[Path]:
    """The places a file of ``kind`` for this model is looked for, in order: bundled, then cache."""
    paths = []
    if kind.bundled is not None and (handle.info.is_embedded or not kind.bundled_embedded_only):
        paths.append(kind.bundled(handle.slug, variant))
    if kind.cache is not None:
        paths.append(cache_path(kind, handle, variant))
    return paths


def read(kind: ArtifactKind[T], path: Path) -> T:
    """``kind.read(path)``, memoized per (path, modification time) when ``kind.memo``.

    Raises:
        OSError: the file is gone; whatever ``kind.read`` raises.
    """
    if not kind.memo:
        return kind.read(path)
    key = (kind.name, str(path), path.stat().st_mtime)
    with _LOCK:
        if key in _MEMO:
            _MEMO.move_to_end(key)
            return _MEMO[key]
        value = kind.read(path)
        _MEMO[key] = value
        while len(_MEMO) > MAX_MEMO:
            _MEMO.popitem(last=False)
        return value


def find(
    kind: ArtifactKind[T], handle: ModelHandle, variant: str = "", *, read_with: Callable[[Path], T] | None = None
) -> T | None:
    """The first stored file of ``kind`` that is readable and fits this model (:func:`candidates` order), or
    ``None``. Files that cannot be read or do not fit are skipped with a log line saying why.

    ``read_with`` replaces the kind's reader for this call (not memoized), e.g. to align a table with other rows.
    """
    for path in candidates(kind, handle, variant):
        if not path.is_file():
            continue
        try:
            value = read(kind, path) if read_with is None else read_with(path)
        except UNREADABLE as exc:
            logger.warning("Ignoring unreadable %s file %s: %s", kind.name, path, exc)
            continue
        reason = None if kind.fresh is None else kind.fresh(value, handle, variant)
        if reason is None:
            return value
        logger.info("Ignoring %s file %s: %s", kind.name, path, reason)
    return None


def find_by_content(kind: ArtifactKind[T], digest: str) -> T | None:
    """The stored file of a kind keyed by the content it was made from (``variant`` = a digest of it, e.g. RADAR's
    feature table), or ``None``: the bundled file first, then the cache, each used only when ``kind.fresh`` (called
    with no handle) accepts it for ``digest``. Needs no handle: such a file fits any model whose content has that
    digest."""
    paths = [kind.bundled("", digest)] if kind.bundled is not None else []
    if kind.cache is not None:
        paths.append(content_cache_path(kind, digest))
    for path in paths:
        if not path.is_file():
            continue
        try:
            value = read(kind, path)
        except UNREADABLE as exc:
            logger.warning("Ignoring unreadable %s file %s: %s", kind.name, path, exc)
            continue
        reason = None if kind.fresh is None else kind.fresh(value, None, digest)  # type: ignore[arg-type]
        if reason is None:
            return value
        logger.info("Ignoring %s file %s: %s", kind.name, path, reason)
    return None


def content_cache_path(kind: ArtifactKind[Any], digest: str) -> Path:
    """Where a computed file of a content-keyed kind (:func:`find_by_content`) is cached.

    Raises:
        ValueError: ``kind`` has no cache location.
    """
    if kind.cache is None:
        raise ValueError(f"{kind.name} files are bundled only")
    return cache_dir() / kind.cache("", digest)


def forget() -> None:
    """Drop every memoized file (tests; a long-running process never needs it: a rewritten file has a new
    modification time)."""
    with _LOCK:
        _MEMO.clear()
