"""Where CRM bases live and how a model finds its own: the bundled NPZ, then the per-model disk cache.

* bundled (embedded model only): ``assets/crm/embedded-<template>.npz`` (:func:`bundled_basis_path`);
* computed: ``<cache_dir>/crm/<handle.slug>/<template>.npz`` (:func:`cache_basis_path`, :func:`core.io.cache_dir`).

A stored basis made for another model, template or version of the bundled calibration prompts is ignored.
Loaded bases are kept in memory per (path, modification time), so the app reads each file once.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from core.io import asset_path, cache_dir
from core.methods.crm.basis import CrmBasis
from core.methods.crm.prompts import CALIBRATION_PROMPTS, load_calibration_prompts, prompt_set_digest
from core.model.handle import ModelHandle
from core.model.loading import EMBEDDED_NAME
from core.model.prompts import resolve_template

logger = logging.getLogger(__name__)

_LOADED: dict[tuple[str, float], CrmBasis] = {}
_DIGESTS: dict[tuple[str, float], str | None] = {}
_LOCK = threading.Lock()


def template_key(handle: ModelHandle, template: str) -> str:
    """The resolved template key (``"auto"`` resolves as the engine does for this tokenizer)."""
    return resolve_template(template, handle.tokenizer).key


def bundled_basis_path(template_key: str) -> Path:
    """Where the embedded model's precomputed basis for a template lives in ``assets/crm/``."""
    return asset_path("crm", f"embedded-{template_key}.npz")


def cache_basis_path(handle: ModelHandle, template: str = "auto") -> Path:
    """The per-model disk cache of a computed basis: ``<cache_dir>/crm/<handle.slug>/<template>.npz``."""
    return cache_dir() / "crm" / handle.slug / f"{template_key(handle, template)}.npz"


def _read_cached(path: Path) -> CrmBasis:
    key = (str(path), path.stat().st_mtime)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = CrmBasis.load(path)
        return _LOADED[key]


def _bundled_digest() -> str | None:
    """The digest of the bundled calibration prompts (cached per file modification time)."""
    try:
        key = (str(CALIBRATION_PROMPTS), CALIBRATION_PROMPTS.stat().st_mtime)
    except OSError:
        return None
    with _LOCK:
        if key not in _DIGESTS:
            try:
                _DIGESTS[key] = prompt_set_digest(load_calibration_prompts())
            except ValueError:
                _DIGESTS[key] = None
        return _DIGESTS[key]


def unusable_reason(basis: CrmBasis, handle: ModelHandle, template_key: str, digest: str | None) -> str | None:
    """Why a stored basis cannot be used for this handle and template (``None`` if it can)."""
    if basis.model != handle.info.name:
        return f"computed for {basis.model!r}"
    if basis.pc1.shape != (handle.info.n_layers + 1, handle.info.hidden_size):
        return f"shape {basis.pc1.shape} does not fit the model"
    if basis.template != template_key:
        return f"computed with template {basis.template!r}"
    if digest is not None and basis.meta.get("prompt_set_sha256") != digest:
        return "computed from another version of the calibration prompts"
    return None


def load_basis(handle: ModelHandle, template: str = "auto") -> CrmBasis | None:
    """The CRM basis of this model and template, or ``None`` when none has been computed.

    Looks at the bundled NPZ for the embedded model, then at the per-model disk cache. A stored basis made
    for another model, template or version of the bundled calibration prompts is ignored (with a log message).
    """
    key = template_key(handle, template)
    digest = _bundled_digest()
    paths = [cache_basis_path(handle, key)]
    if handle.info.name == EMBEDDED_NAME:
        paths.insert(0, bundled_basis_path(key))
    for path in paths:
        if not path.is_file():
            continue
        try:
            basis = _read_cached(path)
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("Ignoring unreadable CRM basis %s: %s", path, exc)
            continue
        reason = unusable_reason(basis, handle, key, digest)
        if reason is None:
            return basis
        logger.info("Ignoring CRM basis %s: %s", path, reason)
    return None
