"""What the audit service does between a validated request and its response: score, record, replay, count.

:class:`AuditRecorder` holds one service's state (the model, the log, the calibration in force, the limits, the
work meter and this run's counters); :func:`core.audit.service.create_app` routes requests to it. Errors leave
as FastAPI ``HTTPException`` with the service's status codes (409 request-id conflict, 413 token, work or time
budget, 422 validation, 503 no calibration, a model whose time is already promised to the requests accepted
(refused up front), a log that failed its integrity check, a request stopped at its deadline or by the server's
shutdown).

A request that passes its budgets is **accepted** only when the model time it needs fits beside what the
requests already accepted were promised (:meth:`core.audit.budget.ModelTurns.admit`); the turns then keep every
accepted request on a schedule that ends before its deadline, so another client's traffic never makes it miss.

A request's model work runs under a :class:`~core.model.handle.CancelToken` that fires at its deadline (the time
budget, counted from its arrival, queueing included) and when the server shuts down
(:meth:`AuditRecorder.begin_shutdown`): the run stops before its next forward pass (or while it waits for the
model), nothing is stored, and the client gets a 503 saying why — a retry with the same ``request_id`` is then
scored afresh. Records are appended only after the model work, in one transaction, so a request is either
recorded whole and answered, or not recorded.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from fastapi import HTTPException, Response

from core.audit.auth import AuditLimits, GuardCounters
from core.audit.budget import ModelBusy, ModelTurns, RunShare, WorkMeter, WorkPlan
from core.audit.calibration import AuditCalibration
from core.audit.chain import ChainHeadError
from core.audit.scoring import AuditInputError, AuditOptions, audit_pairs, prepare_pairs
from core.audit.store import AuditStore, Entry, RequestConflict, conflict_message, text_sha256
from core.model.handle import CancelToken, ModelHandle, RunCancelled, run_control

logger = logging.getLogger(__name__)

SERVICE_VERSION = "1"

CHAIN_REFUSAL = (
    "The audit log failed its integrity check (its newest records are missing or its head was edited), so this "
    "service refuses to record anything; nothing was stored. The operator must run `python -m core audit verify`."
)


def validation_error(loc: list[Any], message: str) -> HTTPException:
    """A 422 in FastAPI's own shape (``loc``, ``msg``, ``type``)."""
    return HTTPException(422, detail=[{"loc": loc, "msg": message, "type": "value_error"}])


def input_error(exc: AuditInputError, batch: bool) -> HTTPException:
    """An input the model layer refused: 413 over a token budget (a pair's, or the request's), else 422, located
    in the body."""
    loc: list[Any] = ["body", "items", exc.index, exc.field] if batch else ["body", exc.field]
    if exc.kind == "work_budget":
        return HTTPException(
            413, detail={"msg": str(exc), "loc": ["body", "items"] if batch else loc, "type": "work_budget"}
        )
    if exc.kind == "token_budget":
        return HTTPException(413, detail={"msg": str(exc), "loc": loc, "type": "token_budget"})
    return validation_error(loc, str(exc))


def conflict(message: str) -> dict[str, Any]:
    """The 409 detail of a ``request_id`` used for another request."""
    return {"msg": message, "loc": ["body", "request_id"], "type": "request_id_conflict"}


def unavailable(message: str, retry_after: int) -> HTTPException:
    """A 503 with a reason and a ``Retry-After`` (seconds)."""
    return HTTPException(503, detail=message, headers={"Retry-After": str(int(retry_after))})


SHUTTING_DOWN = (
    "The audit service is shutting down: this request was stopped before it was recorded (nothing was stored). "
    "Send it again (with the same request_id, if any) once the service is back."
)


@dataclass
class AuditRecorder:
    """One audit service's state and what it does with a request (see :mod:`core.audit.service`).

    Attributes:
        handle, store, calibration, limits, options: the model, the log, the calibration in force (``None``:
            503 until one is given), the limits and the scoring options.
        calibration_note: where the calibration came from; ``calibration_hash``: its content hash in the log.
        model_facts: the model's name, source, weight fingerprint and revision (in every record).
    """

    handle: ModelHandle
    store: AuditStore
    calibration: AuditCalibration | None
    limits: AuditLimits
    options: AuditOptions
    model_facts: dict[str, Any]
    calibration_note: str = ""
    calibration_hash: str | None = None
    counters: GuardCounters = field(default_factory=GuardCounters)
    started: float = field(default_factory=time.time)
    served: dict[str, int] = field(
        default_factory=lambda: {
            "audits": 0,
            "replays": 0,
            "over_budget": 0,
            "busy": 0,
            "past_deadline": 0,
            "stopped": 0,
        }
    )
    meter: WorkMeter = field(default_factory=WorkMeter)
    turns: ModelTurns = field(default_factory=ModelTurns)
    stopping: bool = False
    _active: set[CancelToken] = field(default_factory=set, repr=False)
    _active_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def begin_shutdown(self) -> int:
        """Refuse new audits (503) and stop the running ones before their next forward pass; thread-safe and
        safe to call from a signal handler.

        Returns:
            How many requests were running (each answers 503 and stores nothing, unless it was already past its
            model work: then it is recorded and answered).
        """
        with self._active_lock:
            self.stopping = True
            running = list(self._active)
        for token in running:
            token.cancel("the service is shutting down")
        return len(running)

    def cut_short(self) -> str | None:
        """The 503 message for a request the server's shutdown cuts short mid-run (``None`` when not stopping):
        from now on nothing more is written, so the client is told the truth about its request."""
        if not self.stopping:
            return None
        if self.store.stop_writes():
            return SHUTTING_DOWN
        return (
            "The audit service is shutting down and stopped while this request was being recorded: send it again "
            "with the same request_id once the service is back to learn whether it was stored."
        )

    @contextmanager
    def _running(self, token: CancelToken) -> Iterator[None]:
        with self._active_lock:
            if self.stopping:
                raise unavailable(SHUTTING_DOWN, 10)
            self._active.add(token)
        try:
            yield
        finally:
            with self._active_lock:
                self._active.discard(token)

    def check_budget(self, plan: WorkPlan, batch: bool, n_items: int) -> None:
        """Refuse, before any model call, a request over the token budget or estimated to need more model time
        than the time budget (413 ``work_budget`` / ``time_budget``; the message gives both figures)."""
        loc: list[Any] = ["body", "items"] if batch else ["body", "context"]
        what = f"{n_items} item(s)" if batch else "this pair"
        split = "send fewer or shorter items (or split the batch)" if batch else "shorten the context"
        if plan.tokens > self.limits.max_request_tokens:
            self.served["over_budget"] += 1
            raise HTTPException(
                413,
                detail={
                    "msg": f"{what} ask the model to read {plan.tokens:,} tokens (both prompts of every item); this "
                    f"server takes at most {self.limits.max_request_tokens:,} per request: {split}. Nothing was "
                    "run or stored.",
                    "loc": loc,
                    "type": "work_budget",
                },
            )
        if plan.seconds > self.limits.request_budget_s:
            self.served["over_budget"] += 1
            raise HTTPException(
                413,
                detail={
                    "msg": f"{what} would need about {plan.seconds:,.1f} s of model time on this server "
                    f"({plan.tokens:,} tokens at the speed it measured), over its time budget of "
                    f"{self.limits.request_budget_s:g} s per request: {split}. Nothing was run or stored.",
                    "loc": loc,
                    "type": "time_budget",
                },
            )

    def need_calibration(self) -> AuditCalibration:
        if self.calibration is None:
            raise HTTPException(503, detail=f"No calibration in force: {self.calibration_note}")
        return self.calibration

    def check_new_tokens(self, generate: bool, max_new_tokens: int) -> None:
        if generate and max_new_tokens > self.limits.max_new_tokens:
            raise validation_error(
                ["body", "max_new_tokens"], f"must be at most {self.limits.max_new_tokens} on this server"
            )

    def entry(
        self,
        calib: AuditCalibration,
        pair: Any,
        result: dict[str, Any],
        latency_ms: float,
        ids: tuple[str | None, str | None, int],
        request_fp: dict[str, Any] | None = None,
    ) -> Entry:
        """One record to append: ``pair`` has ``query``/``context``; ``ids`` is (request id, batch id, batch size)."""
        request_id, batch_id, batch_size = ids
        inputs: dict[str, Any] = {"query_sha256": text_sha256(pair.query), "context_sha256": text_sha256(pair.context)}
        if self.store.store_text:
            inputs.update(query=pair.query, context=pair.context)
        latency = round(latency_ms, 3)
        body = {
            "inputs": inputs,
            "result": {**result, "latency_ms": latency, "batch_size": batch_size},
            "model": self.model_facts,
            "calibration": {
                "id": calib.calibration_id,
                "template": calib.template,
                "k_sigma": calib.k,
                "content_hash": self.calibration_hash,
            },
            "service": {"version": SERVICE_VERSION, "store_text": self.store.store_text},
        }
        if request_fp is not None:
            body["request"] = request_fp
        return Entry(
            body=body,
            anomaly_flag=bool(result["anomaly_flag"]),
            anomaly_score=float(result["anomaly_score"]),
            latency_ms=latency,
            model=self.handle.info.name,
            calibration_id=calib.calibration_id,
            request_id=request_id,
            batch_id=batch_id,
        )

    def replayed(
        self, request_id: str | None, request_fp: dict[str, Any] | None, response: Response
    ) -> list[dict[str, Any]] | None:
        """The stored records of a retried request; 409 when the id was used for another request."""
        if request_id is None or request_fp is None:
            return None
        found = self.store.find_request(request_id)
        if not found:
            return None
        if not (all(r.get("request") == request_fp for r in found) and len(found) == request_fp["items"]):
            raise HTTPException(409, detail=conflict(conflict_message(request_id, found)))
        response.headers["X-Audit-Replay"] = "true"
        self.served["replays"] += 1
        return found

    def score(
        self,
        pairs: list[Any],
        request: tuple[str | None, dict[str, Any] | None],
        generate: bool,
        max_new_tokens: int,
        batch: bool,
        response: Response,
    ) -> list[dict[str, Any]]:
        """Score ``pairs`` and append one record each; ``request`` is (``request_id``, its fingerprint)."""
        request_id, request_fp = request
        t0, started = time.perf_counter(), time.monotonic()
        if self.stopping:
            raise unavailable(SHUTTING_DOWN, 10)
        calib = self.need_calibration()
        self.check_new_tokens(generate, max_new_tokens)
        stored = self.replayed(request_id, request_fp, response)
        if stored is not None:
            return stored
        opts = replace(self.options, generate=generate, max_new_tokens=max_new_tokens)
        texts = [(p.query, p.context) for p in pairs]
        try:
            prepared = prepare_pairs(self.handle, texts, opts, max_total_tokens=self.limits.max_request_tokens)
        except AuditInputError as exc:
            if exc.kind == "work_budget":
                self.served["over_budget"] += 1
            raise input_error(exc, batch) from None
        plan = self.meter.plan(
            [len(p.retrieval.ids) for p in prepared],
            [len(p.parametric.ids) for p in prepared],
            batch_size=opts.batch_size,
            new_tokens=max_new_tokens if generate else 0,
        )
        self.check_budget(plan, batch, len(pairs))
        deadline = started + self.limits.request_budget_s
        token = CancelToken(check=lambda: time.monotonic() > deadline)
        with self._running(token):
            share = self._admit(plan, started, batch)
            try:
                with run_control(cancel=token):
                    results = audit_pairs(
                        self.handle, calib, texts, opts, prepared=prepared, meter=self.meter, share=share
                    )
            except AuditInputError as exc:
                raise input_error(exc, batch) from None
            except RunCancelled:
                raise self._stopped(plan, time.monotonic() - started) from None
            finally:
                self.turns.release(share)
        latency = (time.perf_counter() - t0) * 1000.0
        batch_id = uuid.uuid4().hex if batch else None
        ids: list[str | None] = [None] * len(pairs)
        if request_id is not None:
            ids = [f"{request_id}#{i}" for i in range(len(pairs))] if batch else [request_id]
        fp = request_fp if request_id is not None else None
        entries = [
            self.entry(calib, p, r, latency, (rid, batch_id, len(pairs)), fp) for p, r, rid in zip(pairs, results, ids)
        ]
        return self._append(entries, request_id, request_fp, response)

    def _admit(self, plan: WorkPlan, started: float, batch: bool) -> RunShare:
        """The request's reservation of the model (:meth:`ModelTurns.admit`); 503 up front when the model time it
        needs does not fit beside what the requests already accepted were promised."""
        try:
            return self.turns.admit(self.meter, plan, started, self.limits.request_budget_s)
        except ModelBusy as busy:
            self.served["busy"] += 1
            what = "these items" if batch else "this pair"
            raise unavailable(
                f"The model is busy: the requests already accepted need {busy.promised:.0%} of its time until they "
                f"are due, and {what} (about {busy.own_s:.1f} s of model time) would not finish within the time "
                f"budget of {self.limits.request_budget_s:g} s beside them. It was refused before any model work: "
                "nothing was run or stored. Retry after the Retry-After seconds, or send less per request.",
                max(1, math.ceil(busy.retry_after_s)),
            ) from None

    def _stopped(self, plan: WorkPlan, elapsed: float) -> HTTPException:
        """The 503 of a run its cancel token stopped: the server's shutdown, else its deadline."""
        if self.stopping:
            self.served["stopped"] += 1
            return unavailable(SHUTTING_DOWN, 10)
        self.served["past_deadline"] += 1
        logger.warning(
            "Stopped an audit after %.1f s, past its time budget of %g s (estimated %.1f s of model time)",
            elapsed,
            self.limits.request_budget_s,
            plan.seconds,
        )
        return unavailable(
            f"This request ran past its time budget of {self.limits.request_budget_s:g} s ({elapsed:.1f} s, waiting "
            f"for the model included; its own model time was estimated at {plan.seconds:.1f} s, so the machine ran "
            "slower than this server measured, or the model was held longer than planned) and was stopped before "
            "it was recorded: nothing was stored. Retry later, or send less per request.",
            5,
        )

    def _append(
        self, entries: list[Entry], request_id: str | None, request_fp: dict[str, Any] | None, response: Response
    ) -> list[dict[str, Any]]:
        try:
            if request_id is None or request_fp is None:
                records, again = self.store.append(entries), False
            else:  # the lookup and the insert in one transaction: concurrent retries store one set
                records, again = self.store.append_request(request_id, request_fp, entries)
        except RequestConflict as exc:
            raise HTTPException(409, detail=conflict(str(exc))) from None
        except ChainHeadError:
            raise HTTPException(503, detail=CHAIN_REFUSAL) from None
        if again:
            response.headers["X-Audit-Replay"] = "true"
            self.served["replays"] += 1
            return records
        self.served["audits"] += len(records)
        return records

    def stats(self) -> dict[str, Any]:
        """The model, the calibration in force, the log's counters and chain head, and this run's counters."""
        calibration = self.calibration
        return {
            "model": {**self.model_facts, "layers": self.handle.info.n_layers, "device": self.handle.info.device},
            "calibration": None
            if calibration is None
            else {
                "id": calibration.calibration_id,
                "source": self.calibration_note or calibration.source,
                "template": calibration.template,
                "score_threshold": round(float(calibration.score_threshold), 6),
                "alpha": calibration.alpha,
                "audited_layers": len(calibration.audited_layers),
            },
            "log": self.store.stats(),
            "since_start": {
                "started_at": datetime.fromtimestamp(self.started, UTC).isoformat(),
                "audits": self.served["audits"],
                "replays": self.served["replays"],
                "rejected_unauthorized": self.counters.unauthorized,
                "rejected_too_large": self.counters.too_large,
                "rejected_body_timeout": self.counters.timed_out,
                "rejected_header_timeout": self.counters.head_timed_out,
                "rejected_over_budget": self.served["over_budget"],
                "rejected_busy": self.served["busy"],
                "stopped_past_deadline": self.served["past_deadline"],
                "stopped_by_shutdown": self.served["stopped"],
                "model_busy": self.handle.is_busy(),
                "waiting_for_the_model": self.turns.waiting(),
                "model_promised": round(self.turns.promised(), 4),
            },
            "budget": {
                "max_request_tokens": self.limits.max_request_tokens,
                "request_budget_s": self.limits.request_budget_s,
                "seconds_per_unit": self.meter.seconds_per_unit,
                "fair_slice_s": self.meter.slice_s,
            },
            "store_text": self.store.store_text,
        }
