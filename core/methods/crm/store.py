"""Where CRM bases live and how a model finds its own: the bundled NPZ, then the per-model disk cache.

* bundled (embedded model only): ``assets/crm/embedded-<template>.npz`` (:func:`bundled_basis_path`);
* computed: ``<cache_dir>/crm/<handle.slug>/<template>.npz`` (:func:`cache_basis_path`, :func:`core.io.cache_dir`).

A stored basis made for another model, template or version of the bundled calibration prompts is ignored.
The lookup, the memo (per path and modification time) and the lock are the artifact store's
(:data:`CRM_BASIS`, :func:`core.model.artifacts.find`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from core.io import asset_path
from core.methods.crm.basis import CrmBasis
from core.methods.crm.prompts import CALIBRATION_PROMPTS, load_calibration_prompts, prompt_set_digest
from core.model import artifacts
from core.model.handle import ModelHandle
from core.model.prompts import resolve_template

logger = logging.getLogger(__name__)

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
    return artifacts.cache_path(CRM_BASIS, handle, template_key(handle, template))


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


CRM_BASIS = artifacts.ArtifactKind(
    name="crm-basis",
    read=CrmBasis.load,
    bundled=lambda slug, key: bundled_basis_path(key),
    cache=lambda slug, key: Path("crm") / slug / f"{key}.npz",
    fresh=lambda basis, handle, key: unusable_reason(basis, handle, key, _bundled_digest()),
)
"""A CRM basis per (model, resolved template): bundled for the embedded model, else computed and cached."""


def load_basis(handle: ModelHandle, template: str = "auto") -> CrmBasis | None:
    """The CRM basis of this model and template, or ``None`` when none has been computed.

    Looks at the bundled NPZ for the embedded model, then at the per-model disk cache. A stored basis made
    for another model, template or version of the bundled calibration prompts is ignored (with a log message).
    """
    return artifacts.find(CRM_BASIS, handle, template_key(handle, template))
