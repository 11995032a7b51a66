"""The CRM audit service: a FastAPI app over one shared model handle, its calibration and the audit log.

Endpoints (all but ``/health`` and the OpenAPI pages need ``Authorization: Bearer <token>``):

* ``POST /audit`` — one ``{query, context}`` pair → CRM appendix V.1's ``anomaly_flag``, ``anomaly_score``,
  ``lts_trajectory``, ``flagged_layers``, ``latency_ms`` plus the cheap extras of :mod:`core.audit.scoring`;
  the record is committed to the log (:mod:`core.audit.store`) before the response is sent.
* ``POST /audit/batch`` — ``{items: [...]}`` scored in padded batches (one forward per path per chunk), one
  record per item, all committed in one transaction.
* ``GET /history`` (paged; ``flag``, ``since``, ``until``), ``GET /records/{id}``, ``GET /stats``,
  ``GET /calibration``, ``GET /health``.

A client may send ``request_id`` (letters, digits, ``._:-``). The id is bound to its request: the endpoint and
the SHA-256 of the validated body (every field but ``request_id``), kept in each record's ``request`` field in
the chain. The same id with the same body on the same endpoint is not scored again — the stored records come
back (header ``X-Audit-Replay: true``), so retrying after a dropped connection never duplicates a record; the
same id with another body or on the other endpoint is **409** naming the conflict. The lookup and the insert
share one write transaction, so concurrent requests sharing an id store one set of records.

Inputs are validated strictly (no type coercion: ``"generate": "yes"`` and ``"max_new_tokens": "8"`` are 422;
every number is bounded; a query or context of whitespace, zero-width characters and Unicode noncharacters
only is 422; JSON nested deeper than 64 levels is 422), and a validation error never echoes the input. Each
request's work is bounded before it runs (tokens and estimated model time, :mod:`core.audit.budget`: 413 up
front), stopped at its deadline (503, nothing stored), and shares the model with other clients one forward
pass at a time. A fault of the audit database — locked past the busy timeout, deleted, damaged, altered — is a
503 naming it, with ``Retry-After``, never a 500 (:class:`core.audit.reader.AuditDatabaseError`). When the
log's last row is not its stored head (newest records deleted) the service refuses to append: 503, logged
(:class:`core.audit.chain.ChainHeadError`). The model runs only through the handle (its lock serializes the
forward passes of concurrent requests); nothing is generated unless a request sets ``generate``. The Swagger
UI at ``/docs`` (which loads its scripts from a CDN) is off unless ``create_app(docs=True)`` (``serve --docs``).
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.audit.auth import AuditLimits, GuardMiddleware
from core.audit.budget import WorkMeter
from core.audit.calibration import AuditCalibration
from core.audit.chain import canonical_json
from core.audit.forward import model_fingerprint
from core.audit.reader import database_error
from core.audit.recorder import SERVICE_VERSION, AuditRecorder, validation_error
from core.audit.scoring import AuditOptions
from core.audit.store import AuditDatabaseError, AuditStore
from core.model.handle import ModelHandle
from core.model.prompts import has_visible_text, resolve_template

logger = logging.getLogger(__name__)

REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
MAX_NEW_TOKENS_BOUND = 65_536
"""Static bound of ``max_new_tokens`` (the server's own limit, :class:`AuditLimits`, is usually far lower)."""
MAX_PAGE_BOUND = 100_000
MAX_OFFSET = 10**12
"""Largest ``/history`` offset (SQLite's integers overflow at 2**63)."""

PageSize = Annotated[int, Query(ge=1, le=MAX_PAGE_BOUND, description="records per page (at most 500 by default)")]
PageOffset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="records to skip (newest first)")]
FlagFilter = Annotated[bool | None, Query(description="only flagged (true) or unflagged (false) audits")]
Since = Annotated[datetime | None, Query(description="ISO 8601, inclusive; UTC when no zone is given")]
Until = Annotated[datetime | None, Query(description="ISO 8601, exclusive; UTC when no zone is given")]

_bearer = HTTPBearer(auto_error=False, description="The service's token (READ_OR_RECALL_TOKEN or --token-file).")


def _is_noncharacter(char: str) -> bool:
    """Unicode's noncharacters (U+FDD0–U+FDEF and the last two code points of every plane, U+FFFE/U+FFFF …):
    reserved for a program's internal use, never text."""
    code = ord(char)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


def _not_blank(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"is not valid Unicode text (a lone surrogate at character {exc.start})") from None
    if not any(has_visible_text(c) and not _is_noncharacter(c) for c in value):  # stops at the first visible one
        raise ValueError(
            "must contain visible text (whitespace, zero-width characters and Unicode noncharacters such as "
            "U+FFFF alone do not count)"
        )
    return value


class Pair(BaseModel):
    """One (query, context) pair to screen before generation."""

    model_config = ConfigDict(extra="forbid", strict=True)
    query: str = Field(min_length=1, description="The user's question.")
    context: str = Field(min_length=1, description="The retrieved passage the answer should be read from.")

    _check = field_validator("query", "context")(_not_blank)


class AuditRequest(Pair):
    """``POST /audit``'s body."""

    request_id: str | None = Field(
        default=None,
        pattern=REQUEST_ID_PATTERN,
        description="Idempotency key, bound to this body: the same id and body return the stored record; the same "
        "id with another body is 409.",
    )
    generate: bool = Field(default=False, description="Also generate the answer and score RePCS (costs a generate).")
    max_new_tokens: int = Field(
        default=32, ge=1, le=MAX_NEW_TOKENS_BOUND, description="Most answer tokens when generate is true."
    )


class BatchRequest(BaseModel):
    """``POST /audit/batch``'s body."""

    model_config = ConfigDict(extra="forbid", strict=True)
    items: list[Pair] = Field(min_length=1, description="The pairs, scored in padded batches.")
    request_id: str | None = Field(
        default=None, pattern=REQUEST_ID_PATTERN, description="Idempotency key, bound to this body (see /audit)."
    )
    generate: bool = False
    max_new_tokens: int = Field(default=32, ge=1, le=MAX_NEW_TOKENS_BOUND)


def _safe_text(value: object, limit: int = 200) -> str:
    """Text that always encodes (lone surrogates escaped), cut to ``limit`` characters."""
    text = str(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[:limit] + "…"


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """FastAPI's validation errors without the offending input (never echoed: it may be huge, secret, NaN or not
    encodable) — each keeps where (``loc``), what (``msg``) and the error ``type``."""
    out = []
    for error in exc.errors():
        loc = [part if isinstance(part, int) else _safe_text(part, 64) for part in error.get("loc", ())]
        out.append({"loc": loc, "msg": _safe_text(error.get("msg", "invalid")), "type": str(error.get("type", ""))})
    return out


def request_fingerprint(endpoint: str, request: BaseModel, n_items: int) -> dict[str, Any]:
    """What a ``request_id`` is bound to: the endpoint, the SHA-256 of the validated body's canonical JSON (every
    field but ``request_id``; defaults filled in) and the number of pairs."""
    body = canonical_json(request.model_dump(mode="json", exclude={"request_id"}))
    return {"endpoint": endpoint, "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(), "items": n_items}


def _public(record: dict[str, Any]) -> dict[str, Any]:
    """The response form of a stored record: the result's fields at the top, then where it sits in the log."""
    return {
        **record["result"],
        "id": record["id"],
        "seq": record["chain"]["seq"],
        "created_at": record["created_at"],
        "request_id": record.get("request_id"),
        "batch_id": record.get("batch_id"),
        "model": record["model"]["name"],
        "calibration_id": record["calibration"]["id"],
        "hash": record["chain"]["hash"],
    }


def _timestamp(value: datetime | None) -> float | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def create_app(
    handle: ModelHandle,
    store: AuditStore,
    calibration: AuditCalibration | None,
    token: str,
    limits: AuditLimits | None = None,
    *,
    template: str = "auto",
    calibration_note: str = "",
    docs: bool = False,
    meter: WorkMeter | None = None,
) -> FastAPI:
    """Build the audit service around a loaded model.

    Args:
        handle: the shared model (the same handle type and lock as the app and the CLI).
        store: the audit log; its ``store_text`` says whether texts are kept or only their hashes.
        calibration: the PC1 basis and μ/σ in force (``None``: ``/audit`` answers 503 until one is given).
        token: the bearer token (see :func:`core.audit.auth.load_token`).
        limits: body size, batch size, token and page limits.
        template: the prompt template (``"auto"`` or a key); must be the calibration's.
        calibration_note: a sentence saying where the calibration came from (``/calibration``, ``/stats``).
        docs: serve the Swagger UI at ``/docs`` and ReDoc at ``/redoc`` (their scripts come from a CDN); off by
            default. ``/openapi.json`` is always served.
        meter: the model-time meter behind the time budget and the fair slices (default: one started from a
            probe forward pass, :meth:`~core.audit.budget.WorkMeter.probe`).

    The app's :attr:`state` holds the recorder (``app.state.recorder``): ``serve`` calls its
    :meth:`~core.audit.recorder.AuditRecorder.begin_shutdown` on SIGTERM.

    Raises:
        ValueError: a calibration made for another model or template.
    """
    limits = limits or AuditLimits()
    recorder = _recorder(handle, store, calibration, limits, template, calibration_note)
    if meter is None:
        meter = WorkMeter()
        meter.probe(handle)
    recorder.meter = meter
    app = FastAPI(
        title="Read or Recall — CRM audit service",
        version=SERVICE_VERSION,
        description=(
            "Screens (context, query) pairs before generation with CRM's latent trajectory shift (one forward "
            "pass per path, no generation), keeps every audit in a hash-chained SQLite log. Send "
            "`Authorization: Bearer <token>` on every endpoint but /health. Never paste the token into a web page "
            "you did not write; use curl or your own client."
        ),
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    app.add_middleware(
        GuardMiddleware,
        token=token,
        max_body_bytes=limits.max_body_bytes,
        counters=recorder.counters,
        body_timeout_s=limits.body_timeout_s,
        on_cancel=recorder.cut_short,
    )
    app.state.recorder = recorder
    _error_handlers(app, store)
    _audit_routes(app, recorder)
    _read_routes(app, recorder)
    return app


def _recorder(
    handle: ModelHandle,
    store: AuditStore,
    calibration: AuditCalibration | None,
    limits: AuditLimits,
    template: str,
    calibration_note: str,
) -> AuditRecorder:
    """The service's recorder: the calibration checked against the model and template, and registered in the log."""
    fingerprint = model_fingerprint(handle)
    template_key = resolve_template(template, handle.tokenizer).key
    calibration_hash = None
    if calibration is not None:
        calibration.check_for(handle, fingerprint, template_key)
        calibration_hash = store.register_calibration(calibration.describe())
    return AuditRecorder(
        handle=handle,
        store=store,
        calibration=calibration,
        limits=limits,
        options=AuditOptions(template=template_key, max_prompt_tokens=limits.max_prompt_tokens),
        model_facts={
            "name": handle.info.name,
            "source": handle.info.source,
            "fingerprint": fingerprint,
            "revision": getattr(getattr(handle.model, "config", None), "_commit_hash", None),
        },
        calibration_note=calibration_note,
        calibration_hash=calibration_hash,
    )


def _error_handlers(app: FastAPI, store: AuditStore) -> None:
    """422 for a request the schema refuses; 503 for an audit log that cannot serve it."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": _validation_errors(exc)})

    @app.exception_handler(AuditDatabaseError)
    async def _log_unavailable(request: Request, exc: AuditDatabaseError) -> JSONResponse:
        return _database_503(request, exc)

    @app.exception_handler(sqlite3.Error)
    async def _sqlite_error(request: Request, exc: sqlite3.Error) -> JSONResponse:  # a fault no layer named
        return _database_503(request, database_error(exc, store.path))


def _database_503(request: Request, exc: AuditDatabaseError) -> JSONResponse:
    """503 for an audit log that cannot serve the request now: its reason, a ``Retry-After``, one log line."""
    logger.error("%s %s: audit log unavailable (%s): %s", request.method, request.url.path, exc.kind, exc)
    return JSONResponse(
        status_code=503,
        content={"detail": f"The audit log is unavailable ({exc.kind}): {exc}"},
        headers={"Retry-After": str(exc.retry_after)},
    )


def _audit_routes(app: FastAPI, recorder: AuditRecorder) -> None:
    """``POST /audit`` and ``POST /audit/batch``."""
    protected = [Depends(_bearer)]
    limits = recorder.limits

    @app.post("/audit", dependencies=protected, summary="Audit one (query, context) pair")
    def audit(request: AuditRequest, response: Response) -> dict[str, Any]:
        """CRM's trajectory and the audit rule for one pair; committed to the log before this returns."""
        fp = request_fingerprint("POST /audit", request, 1)
        records = recorder.score(
            [request], (request.request_id, fp), request.generate, request.max_new_tokens, False, response
        )
        return _public(records[0])

    @app.post("/audit/batch", dependencies=protected, summary="Audit many pairs in padded batches")
    def audit_batch(request: BatchRequest, response: Response) -> dict[str, Any]:
        """One record per item (same ``batch_id``), scored with one padded forward per path per chunk."""
        if len(request.items) > limits.max_batch_items:
            raise HTTPException(
                413,
                detail={
                    "msg": f"{len(request.items)} items; this server takes at most {limits.max_batch_items} per batch",
                    "loc": ["body", "items"],
                    "type": "batch_size",
                },
            )
        t0 = time.perf_counter()
        fp = request_fingerprint("POST /audit/batch", request, len(request.items))
        records = recorder.score(
            request.items, (request.request_id, fp), request.generate, request.max_new_tokens, True, response
        )
        return {
            "batch_id": records[0].get("batch_id"),
            "n": len(records),
            "latency_ms": round((time.perf_counter() - t0) * 1000.0, 3),
            "records": [_public(r) for r in records],
        }


def _read_routes(app: FastAPI, recorder: AuditRecorder) -> None:
    """``GET /history``, ``/records/{id}``, ``/stats``, ``/calibration`` and ``/health``."""
    protected = [Depends(_bearer)]
    store = recorder.store

    @app.get("/history", dependencies=protected, summary="A page of the audit log, newest first")
    def history(
        limit: PageSize = 50,
        offset: PageOffset = 0,
        flag: FlagFilter = None,
        since: Since = None,
        until: Until = None,
    ) -> dict[str, Any]:
        """Record summaries (no texts, no trajectories); ``next_offset`` is ``null`` on the last page."""
        if limit > recorder.limits.max_page:
            raise validation_error(["query", "limit"], f"must be at most {recorder.limits.max_page}")
        total, rows = store.history(
            limit=limit, offset=offset, flag=flag, since=_timestamp(since), until=_timestamp(until)
        )
        nxt = offset + len(rows)
        return {
            "total": total,
            "limit": limit,
            "offset": offset,
            "next_offset": nxt if nxt < total else None,
            "records": rows,
        }

    @app.get("/records/{record_id}", dependencies=protected, summary="One full record with its chain fields")
    def record(record_id: str) -> dict[str, Any]:
        """The stored record: inputs (hashes, texts unless --no-store-text), result, model, calibration, chain."""
        found = store.get(record_id)
        if found is None:
            raise HTTPException(404, detail="No audit record with that id.")  # the id is not echoed
        return found

    @app.get("/stats", dependencies=protected, summary="Model, calibration and counters")
    def stats() -> dict[str, Any]:
        """The model, the calibration in force, the log's counters and chain head, and this run's counters."""
        return recorder.stats()

    @app.get("/calibration", dependencies=protected, summary="The calibration in force")
    def calibration_info() -> dict[str, Any]:
        """μ_ℓ, σ_ℓ, audited layers, the flag's threshold and where the calibration came from."""
        calib = recorder.need_calibration()
        return {**calib.describe(), "note": recorder.calibration_note}

    @app.get("/health", summary="Liveness (no token needed)")
    def health() -> dict[str, Any]:
        """``{"status": "ok", "calibrated": …}``; reveals no audit."""
        return {"status": "ok", "calibrated": recorder.calibration is not None}
