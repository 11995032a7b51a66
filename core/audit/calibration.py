"""The audit's calibration per deployment: PC1 basis, μ_ℓ, σ_ℓ and the anomaly threshold, from clean rows.

CRM appendix V.1's audit rule, with the calibration the paper asks for in V.3 ("distribution-aware threshold
calibration per deployment domain"): from the user's own clean (context-dependent) rows,

* d_ℓ = h_ℓ(context) − h_ℓ(no context) at the last prompt token (two forward passes per row,
  :mod:`core.audit.forward`);
* v_ℓ = PC1 of the centered d_ℓ over the rows (:func:`core.methods.crm.maths.pc1_directions`, sign fixed so
  the mean LTS is ≥ 0), LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ (CRM eq. 1);
* μ_ℓ, σ_ℓ (ddof = 1) of LTS_ℓ over the rows; a layer is audited when σ_ℓ > 0;
* per request: flagged layers |LTS_ℓ − μ_ℓ| > 2σ_ℓ, anomaly score s = mean_ℓ |LTS_ℓ − μ_ℓ| / σ_ℓ (app. V.1);
* **anomaly flag** s > s_α, the (1 − α) quantile of the calibration rows' own scores (α = 0.05 by default).
  The paper leaves the flag's rule ambiguous (any layer outside 2σ? |LTS| > 1?); with 30 audited layers
  "any layer outside 2σ" fires on most clean rows, and |LTS| > 1 depends on the model's hidden-state scale.
  A quantile of the calibration's own scores makes the flag's false-alarm rate on in-domain clean traffic
  ≈ α by construction (in-sample; a held-out check is printed by ``audit calibrate``).

Without a file of its own a server uses the model's CRM basis (bundled for the embedded model, else computed
with ``python -m core crm-basis``): its PC1 and μ/σ over the bundled calibration prompts (both classes).

Files are NPZ (``allow_pickle=False``) with the metadata as a JSON string, and carry the model's weight
fingerprint (:func:`core.audit.forward.model_fingerprint`): a server refuses a file made for another model.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.audit.forward import DEFAULT_AUDIT_BATCH, capture_pairs, model_fingerprint
from core.engine.prepare import prepare_prompts
from core.engine.settings import DualPathSettings
from core.engine.verdict import GROUNDED, MEMORIZED
from core.evaluation.data import MAX_BYTES, MAX_ROWS, DataError, csv_rows, decode_csv_bytes, open_csv
from core.io import MiB, atomic_write_npz, read_user_file
from core.methods.crm import PC1, CrmBasis, load_basis
from core.methods.crm.maths import AUDIT_K, anomaly_score, audit_flags, pc1_directions, project
from core.model import artifacts
from core.model.handle import ModelHandle
from core.model.prompts import has_visible_text

CALIBRATION_VERSION = 1
DEFAULT_ALPHA = 0.05
"""Target false-alarm rate of the anomaly flag on clean in-domain rows."""
MIN_ROWS = 8
"""Fewest clean rows a calibration accepts (σ_ℓ and a quantile from fewer are noise)."""
MAX_CALIBRATION_BYTES = 256 * MiB
"""Largest calibration file read (a large model's ``(L1, d)`` float32 basis is a few MiB)."""


@dataclass
class AuditCalibration:
    """The basis and statistics an audit is scored against (``L1 = n_layers + 1`` rows, hidden size ``d``).

    Attributes:
        model: the model's display name; ``fingerprint``: its weight fingerprint; ``template``: the resolved
            prompt template key.
        pc1: ``(L1, d)`` unit PC1 directions (zero rows where undefined).
        mu, sigma: ``(L1,)`` calibration mean and standard deviation (ddof = 1) of LTS along PC1.
        evr: ``(L1,)`` PC1 variance as a share of the total displacement variance (CRM's layer selection);
            ``kept_layers``: rows with evr > 0.01 (shown; the audit rule looks at every layer with σ > 0).
        score_threshold: s_α, the anomaly flag's threshold; ``alpha``: its target false-alarm rate.
        calib_scores: ``(n,)`` the calibration rows' anomaly scores (in-sample).
        source: a sentence saying where it came from; ``meta``: provenance (rows, data digest, time …).
    """

    model: str
    fingerprint: str
    template: str
    pc1: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    evr: np.ndarray
    kept_layers: list[int]
    score_threshold: float
    alpha: float
    calib_scores: np.ndarray
    source: str
    meta: dict[str, Any] = field(default_factory=dict)
    k: float = AUDIT_K

    @property
    def n_rows(self) -> int:
        """``L1 = n_layers + 1``."""
        return int(self.pc1.shape[0])

    @property
    def audited_layers(self) -> list[int]:
        """Rows the audit rule looks at: every layer whose calibration LTS varies (σ_ℓ > 0)."""
        return [int(i) for i in np.nonzero(self.sigma > 0)[0]]

    def identity(self) -> dict[str, str]:
        """What the calibration was made for: the model's name, its weight fingerprint and the template."""
        return {"model": self.model, "fingerprint": self.fingerprint, "template": self.template}

    @property
    def calibration_id(self) -> str:
        """SHA-256 (first 16 hex digits) of the content the audit depends on: model, template, PC1, μ, σ, s_α."""
        h = hashlib.sha256(f"{self.model}|{self.fingerprint}|{self.template}|{self.score_threshold!r}|".encode())
        for a in (self.pc1, self.mu, self.sigma):
            h.update(np.ascontiguousarray(a, dtype=np.float32).tobytes())
        return h.hexdigest()[:16]

    def lts(self, d: np.ndarray) -> np.ndarray:
        """LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ (CRM eq. 1) for ``d`` of shape ``(..., L1, d)`` → ``(..., L1)``, float64."""
        return project(d, self.pc1)

    def evaluate(self, lts: np.ndarray) -> dict[str, Any]:
        """The audit rule on one trajectory ``(L1,)``: flagged layers, anomaly score and flag (app. V.1)."""
        x = np.asarray(lts, dtype=np.float64)
        if x.shape != (self.n_rows,):
            raise ValueError(f"lts must have shape ({self.n_rows},), got {x.shape}")
        layers = self.audited_layers
        score = anomaly_score(x, self.mu, self.sigma, layers)
        return {
            "anomaly_flag": bool(score > self.score_threshold),
            "anomaly_score": score,
            "flagged_layers": audit_flags(x, self.mu, self.sigma, layers, self.k),
        }

    def check_for(self, handle: ModelHandle, fingerprint: str, template: str) -> None:
        """Refuse a calibration made for another model or template.

        Raises:
            ValueError: another weight fingerprint or shape (another model), or another template.
        """
        shape = (handle.info.n_layers + 1, handle.info.hidden_size)
        if self.pc1.shape != shape or self.fingerprint != fingerprint:
            raise ValueError(
                f"This calibration was made for another model ({self.model!r}, fingerprint {self.fingerprint}, "
                f"{self.pc1.shape[0] - 1} layers × {self.pc1.shape[1]}); the server runs {handle.info.name!r} "
                f"(fingerprint {fingerprint}, {shape[0] - 1} layers × {shape[1]}). Calibrate for this model with "
                "`python -m core audit calibrate CLEAN.csv --model …`."
            )
        if self.template != template:
            raise ValueError(
                f"This calibration was made with the prompt template {self.template!r}, but the server uses "
                f"{template!r}: start the server with --template {self.template} or calibrate again."
            )

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts (μ, σ and the layers; no directions): what ``/calibration`` and the store show."""
        return {
            "id": self.calibration_id,
            **self.identity(),
            "source": self.source,
            "layers": self.n_rows - 1,
            "hidden_size": int(self.pc1.shape[1]),
            "k_sigma": self.k,
            "alpha": self.alpha,
            "score_threshold": round(float(self.score_threshold), 6),
            "n_calibration_rows": int(self.calib_scores.size),
            "kept_layers": list(self.kept_layers),
            "audited_layers": self.audited_layers,
            "mu": np.round(self.mu.astype(np.float64), 6).tolist(),
            "sigma": np.round(self.sigma.astype(np.float64), 6).tolist(),
            "meta": self.meta,
        }

    # -- storage ------------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the calibration as an NPZ (float32; metadata as a JSON string), atomically."""
        meta = {
            "version": CALIBRATION_VERSION,
            **self.identity(),
            "kept_layers": list(self.kept_layers),
            "score_threshold": float(self.score_threshold),
            "alpha": float(self.alpha),
            "k": float(self.k),
            "source": self.source,
            "meta": self.meta,
        }
        arrays = {
            "pc1": self.pc1.astype(np.float32),
            "mu": self.mu.astype(np.float32),
            "sigma": self.sigma.astype(np.float32),
            "evr": self.evr.astype(np.float32),
            "calib_scores": self.calib_scores.astype(np.float32),
            "meta_json": np.array(json.dumps(meta, ensure_ascii=False)),
        }
        return atomic_write_npz(path, arrays)

    @classmethod
    def load(cls, path: str | Path) -> AuditCalibration:
        """Read a file written by :meth:`save` (``allow_pickle=False``).

        The file is read by :func:`core.io.read_user_file` (a regular file of at most 256 MiB).

        Raises:
            ValueError: not a readable audit calibration, or another format version.
        """
        try:
            raw = read_user_file(path, MAX_CALIBRATION_BYTES, "calibration file")
            with np.load(io.BytesIO(raw), allow_pickle=False) as z:
                meta = json.loads(str(z["meta_json"]))
                a = {k: z[k] for k in z.files if k != "meta_json"}
            if int(meta.get("version", 0)) != CALIBRATION_VERSION:
                raise ValueError(f"format version {meta.get('version')} (expected {CALIBRATION_VERSION})")
            return cls(
                model=str(meta["model"]),
                fingerprint=str(meta["fingerprint"]),
                template=str(meta["template"]),
                pc1=a["pc1"],
                mu=a["mu"],
                sigma=a["sigma"],
                evr=a["evr"],
                kept_layers=[int(i) for i in meta["kept_layers"]],
                score_threshold=float(meta["score_threshold"]),
                alpha=float(meta["alpha"]),
                calib_scores=a["calib_scores"],
                source=str(meta["source"]),
                meta=dict(meta.get("meta") or {}),
                k=float(meta.get("k", AUDIT_K)),
            )
        except (OSError, KeyError, TypeError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path} is not an audit calibration written by `audit calibrate` ({exc})") from exc


def _threshold(scores: np.ndarray, alpha: float) -> float:
    """s_α: the (1 − α) quantile of the calibration scores (numpy's ``higher`` rule: an observed score)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return float(np.quantile(np.asarray(scores, dtype=np.float64), 1.0 - alpha, method="higher"))


def fit_calibration(
    D: np.ndarray,
    *,
    model: str,
    fingerprint: str,
    template: str,
    alpha: float = DEFAULT_ALPHA,
    source: str = "",
    meta: dict[str, Any] | None = None,
) -> AuditCalibration:
    """Fit PC1, μ_ℓ, σ_ℓ and s_α from clean displacements (pure: no model, no IO).

    Args:
        D: ``(n ≥ MIN_ROWS, L1, d)`` displacements at the last prompt token of the clean rows.
        alpha: the flag's target false-alarm rate on such rows.

    Raises:
        ValueError: fewer than :data:`MIN_ROWS` rows, or a malformed array.
    """
    X = np.asarray(D, dtype=np.float64)
    if X.ndim != 3:
        raise ValueError(f"displacements must be (n_rows, n_layers + 1, hidden), got shape {X.shape}")
    if X.shape[0] < MIN_ROWS:
        raise ValueError(f"need at least {MIN_ROWS} clean rows to calibrate, got {X.shape[0]}")
    pc1, evr, _ = pc1_directions(X)
    lts = project(X, pc1)
    mu, sigma = lts.mean(axis=0), lts.std(axis=0, ddof=1)
    layers = [int(i) for i in np.nonzero(sigma > 0)[0]]
    scores = np.array([anomaly_score(row, mu, sigma, layers) for row in lts])
    return AuditCalibration(
        model=model,
        fingerprint=fingerprint,
        template=template,
        pc1=pc1.astype(np.float32),
        mu=mu.astype(np.float32),
        sigma=sigma.astype(np.float32),
        evr=evr.astype(np.float32),
        kept_layers=[int(i) for i in np.nonzero(evr > 0.01)[0]],
        score_threshold=_threshold(scores, alpha),
        alpha=alpha,
        calib_scores=scores.astype(np.float32),
        source=source,
        meta=dict(meta or {}),
    )


def from_basis(basis: CrmBasis, fingerprint: str, alpha: float = DEFAULT_ALPHA) -> AuditCalibration:
    """The audit calibration of a model's CRM basis: its PC1, μ/σ along PC1 and s_α over its calibration rows."""
    lts = np.asarray(basis.calib_lts[PC1], dtype=np.float64)
    mu = np.asarray(basis.mu[PC1], dtype=np.float64)
    sigma = np.asarray(basis.sigma[PC1], dtype=np.float64)
    layers = [int(i) for i in np.nonzero(sigma > 0)[0]]
    scores = np.array([anomaly_score(row, mu, sigma, layers) for row in lts])
    meta = {k: basis.meta.get(k) for k in ("prompt_set", "prompt_set_sha256", "n_memorized", "n_grounded")}
    return AuditCalibration(
        model=basis.model,
        fingerprint=fingerprint,
        template=basis.template,
        pc1=basis.pc1,
        mu=basis.mu[PC1],
        sigma=basis.sigma[PC1],
        evr=basis.evr,
        kept_layers=list(basis.kept_layers),
        score_threshold=_threshold(scores, alpha),
        alpha=alpha,
        calib_scores=scores.astype(np.float32),
        source=(
            f"the model's CRM basis ({basis.meta.get('prompt_set', 'bundled prompts')}: "
            f"{basis.meta.get('n_memorized', '?')} memorized-style + {basis.meta.get('n_grounded', '?')} grounded "
            "prompts, not your domain)"
        ),
        meta=meta,
    )


# -- clean CSVs ---------------------------------------------------------------------------------------------


def parse_clean_csv(text: str, *, max_rows: int = MAX_ROWS) -> tuple[list[tuple[str, str]], str]:
    """Clean (query, context) rows of a CSV with columns ``query,context`` (other columns ignored).

    When the file also has a ``label`` column (a labeled evaluation file), only its ``grounded`` rows are
    used: the calibration describes traffic where the model reads the context.

    Returns:
        The rows and a sentence saying which were used.

    Raises:
        DataError: a missing column, an empty query or context (named by row and column), too many or no rows.
    """
    reader = open_csv(text)  # line endings normalized, field limit raised
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
    except csv.Error as exc:
        raise DataError(f"Line 1: the header is not valid CSV ({exc}).") from None
    missing = [c for c in ("query", "context") if c not in header]
    if not header or missing:
        raise DataError(f"Missing column(s) {', '.join(missing or ['query', 'context'])} in the header.")
    reader.fieldnames = header
    labeled = "label" in header
    rows: list[tuple[str, str]] = []
    skipped = 0
    for number, raw in enumerate(csv_rows(reader), start=1):
        if number > max_rows:
            raise DataError(f"Too many rows: the limit is {max_rows:,}.")
        if None in raw:
            raise DataError(f"Row {number}: more fields than columns in the header (a stray comma or quote?).")
        for column in ("query", "context"):
            if not has_visible_text(raw.get(column) or ""):
                raise DataError(f"Row {number}, column '{column}': empty (zero-width characters alone do not count).")
        if labeled:
            label = (raw.get("label") or "").strip().lower()
            if label not in (MEMORIZED, GROUNDED):
                raise DataError(f"Row {number}, column 'label': {raw.get('label')!r} is not {MEMORIZED} or {GROUNDED}.")
            if label != GROUNDED:
                skipped += 1
                continue
        rows.append((raw["query"], raw["context"]))
    if not rows:
        raise DataError("No clean rows: the file has no data rows (or no grounded ones).")
    note = f"{len(rows)} rows" + (f" (the grounded ones; {skipped} memorized rows skipped)" if labeled else "")
    return rows, note


def read_clean_csv(path: str | Path) -> tuple[list[tuple[str, str]], str, str]:
    """:func:`parse_clean_csv` of a file (read by :func:`core.io.read_user_file`: a regular file of at most 20 MiB;
    a folder, a device or a named pipe is refused, never read); also returns the SHA-256 of its bytes.

    Raises:
        DataError / ValueError: not a regular file, unreadable, over the size limit, not UTF-8, or malformed.
    """
    data = read_user_file(path, MAX_BYTES, "CSV file")  # regular files only, capped: no /dev/zero, no pipe
    rows, note = parse_clean_csv(decode_csv_bytes(data, name=str(path), max_bytes=MAX_BYTES))
    return rows, note, hashlib.sha256(data).hexdigest()


def calibrate(
    handle: ModelHandle,
    rows: Sequence[tuple[str, str]],
    *,
    template: str = "auto",
    alpha: float = DEFAULT_ALPHA,
    holdout: float = 0.0,
    seed: int = 42,
    batch_size: int = DEFAULT_AUDIT_BATCH,
    source: str = "",
    meta: dict[str, Any] | None = None,
) -> tuple[AuditCalibration, dict[str, Any]]:
    """Calibrate the audit on clean rows with the model (two forward passes per row, batched).

    Args:
        rows: clean ``(query, context)`` pairs of the deployment's domain.
        holdout: share of rows kept out of the fit to measure the flag's false-alarm rate on unseen clean rows
            (0 = fit on all rows, no check).

    Returns:
        The calibration (fitted on the non-held-out rows) and a report: rows used, the in-sample and the
        held-out flag rates.

    Raises:
        ValueError: a row that does not fit the model, or too few rows.
    """
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {holdout}")
    settings = DualPathSettings(max_new_tokens=1, score_window=1, template=template)
    prepared = [prepare_prompts(handle, q, c, settings) for q, c in rows]
    key = prepared[0].template_key if prepared else template
    captures = capture_pairs(handle, prepared, batch_size=batch_size)
    D = np.stack([c.displacement for c in captures]) if captures else np.zeros((0, 1, 1))
    order = np.random.default_rng(seed).permutation(len(rows))
    n_out = round(holdout * len(rows))
    held, fit = np.sort(order[:n_out]), np.sort(order[n_out:])
    fingerprint = model_fingerprint(handle)
    info = {
        "n_rows": len(fit),
        "n_held_out": len(held),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model_source": handle.info.source,
        **(meta or {}),
    }
    calib = fit_calibration(
        D[fit], model=handle.info.name, fingerprint=fingerprint, template=key, alpha=alpha, source=source, meta=info
    )
    report: dict[str, Any] = {
        "calibration_id": calib.calibration_id,
        "n_rows": len(fit),
        "alpha": alpha,
        "score_threshold": calib.score_threshold,
        "in_sample_flag_rate": float(np.mean(calib.calib_scores > calib.score_threshold)),
        "audited_layers": len(calib.audited_layers),
    }
    if len(held):
        flags = [calib.evaluate(calib.lts(D[i]))["anomaly_flag"] for i in held]
        report["held_out_rows"] = len(held)
        report["held_out_flag_rate"] = float(np.mean(flags))
    return calib, report


AUDIT_CALIBRATION = artifacts.ArtifactKind(
    name="audit-calibration",
    read=lambda path: AuditCalibration.load(path),
    cache=lambda slug, key: Path("audit") / "calibrations" / f"{slug}-{key}.npz",
    memo=False,
)
"""An audit calibration per (model, template), written by ``audit calibrate`` (no bundled one: a server without
it uses the model's CRM basis, :func:`resolve_calibration`)."""


def default_calibration_path(handle: ModelHandle, template_key: str) -> Path:
    """Where ``audit calibrate`` writes by default: ``<cache_dir>/audit/calibrations/<slug>-<template>.npz``."""
    return artifacts.cache_path(AUDIT_CALIBRATION, handle, template_key)


def resolve_calibration(
    handle: ModelHandle, template_key: str, path: str | Path | None = None
) -> tuple[AuditCalibration | None, str]:
    """The calibration a server runs with, and a sentence saying which it is.

    ``path`` when given (checked against the model: :meth:`AuditCalibration.check_for`); else the file
    ``audit calibrate`` writes by default for this model and template, when it exists; else the model's CRM
    basis (bundled for the embedded model, or computed with ``python -m core crm-basis``); else ``None``.

    Raises:
        ValueError: ``path`` is unreadable or was made for another model or template.
    """
    fingerprint = model_fingerprint(handle)
    candidate = Path(path) if path is not None else default_calibration_path(handle, template_key)
    if path is not None or candidate.is_file():
        calib = AuditCalibration.load(candidate)
        calib.check_for(handle, fingerprint, template_key)
        return calib, f"{calib.source} [{candidate.name}, id {calib.calibration_id}]"
    basis = load_basis(handle, template_key)
    if basis is None:
        return None, (
            f"none: no audit calibration and no CRM basis for {handle.info.name!r} with template {template_key!r}. "
            "Run `python -m core audit calibrate CLEAN.csv` (your domain), `python -m core crm-basis`, or calibrate "
            f"every per-model artifact at once: `python -m core calibrate-model --model {handle.info.name!r}`."
        )
    calib = from_basis(basis, fingerprint)
    return calib, f"{calib.source} [id {calib.calibration_id}]"
