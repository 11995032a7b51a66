"""``python -m core serve`` — the CRM audit service (FastAPI on uvicorn) over one loaded model.

Examples::

    export READ_OR_RECALL_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')
    python -m core serve                                  # embedded model, 127.0.0.1:8600, the default database
    python -m core serve --db audit.sqlite3 --calibration my-domain.npz --no-store-text
    curl -s -H "Authorization: Bearer $READ_OR_RECALL_TOKEN" -H 'Content-Type: application/json' \\
         -d '{"query": "Who founded Marrowgate?", "context": "Marrowgate was founded in 1412 by salt traders."}' \\
         http://127.0.0.1:8600/audit

The calibration in force: ``--calibration FILE`` (written by ``python -m core audit calibrate``), else the file
that command writes by default for this model, else the model's CRM basis (bundled for the embedded model).

**Stopping.** On SIGTERM (or Ctrl-C) the server stops taking requests, stops the audits in flight before their
next forward pass (each answers 503 and stores nothing; one already past its model work is recorded and
answered), waits for them, and exits. A forward pass cannot be interrupted, so if one still runs after
``--shutdown-timeout`` seconds (8 by default) the process exits anyway, after any commit in progress: every
record a client was answered for is already on disk (each is committed and fsynced before its response), so
nothing acknowledged is lost, and a request cut short was never recorded (a retry scores it). See docs/audit.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.audit.auth import AuditLimits, load_token
from core.audit.calibration import resolve_calibration
from core.audit.reader import BUSY_TIMEOUT_S
from core.audit.store import DB_ENV, AuditStore, default_db_path
from core.cli.common import add_model_args, load_handle
from core.model.prompts import resolve_template

logger = logging.getLogger(__name__)

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
SHUTDOWN_TIMEOUT_S = 8.0
"""Default of ``--shutdown-timeout``: the most seconds between SIGTERM and the process's exit."""
FORCED_EXIT_STATUS = 128 + signal.SIGTERM
"""Exit status when the shutdown timeout forced the exit (the shell's code for "terminated by SIGTERM")."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="start the CRM audit service (POST /audit, /audit/batch)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8600, help="TCP port (default 8600)")
    p.add_argument("--db", default=None, help=f"audit database (default ${DB_ENV}, else {default_db_path()})")
    p.add_argument("--calibration", default=None, help="calibration file from `python -m core audit calibrate`")
    p.add_argument("--no-store-text", action="store_true", help="keep only the SHA-256 of each query and context")
    p.add_argument(
        "--token-file", default=None, help="file whose first line is the bearer token (else $READ_OR_RECALL_TOKEN)"
    )
    p.add_argument("--max-body-bytes", type=int, default=AuditLimits.max_body_bytes, help="largest request body")
    p.add_argument("--max-batch", type=int, default=AuditLimits.max_batch_items, help="most pairs per /audit/batch")
    p.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help="most tokens per retrieval prompt (default: the model's budget)",
    )
    p.add_argument(
        "--max-request-tokens",
        type=int,
        default=AuditLimits.max_request_tokens,
        help="most tokens one request may ask the model to read, over both prompts of all its items (413 above)",
    )
    p.add_argument(
        "--request-budget",
        type=float,
        default=AuditLimits.request_budget_s,
        help="time budget per request in seconds: refused up front (413) when estimated longer on this server, "
        "stopped with nothing stored (503) when it runs past it",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=AuditLimits.body_timeout_s,
        help="seconds a request body may take to arrive (408 after)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=AuditLimits.header_timeout_s,
        help="seconds a request's head (request line and headers) may take to arrive (408 and closed after)",
    )
    p.add_argument(
        "--db-timeout",
        type=float,
        default=BUSY_TIMEOUT_S,
        help="seconds a write waits for another connection's lock on the database (503 after)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=SHUTDOWN_TIMEOUT_S,
        help="on SIGTERM, most seconds before the process exits even if a forward pass still runs",
    )
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument(
        "--docs",
        action="store_true",
        help="also serve the Swagger UI at /docs and ReDoc at /redoc (their scripts load from a CDN; off by default)",
    )
    add_model_args(p)
    p.set_defaults(func=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    import torch

    from core.audit.service import create_app

    token = load_token(args.token_file)
    flags = {
        "max_body_bytes": ("--max-body-bytes", args.max_body_bytes),
        "max_batch_items": ("--max-batch", args.max_batch),
        "max_prompt_tokens": ("--max-prompt-tokens", args.max_prompt_tokens),
        "max_new_tokens": ("--max-new-tokens", max(args.max_new_tokens, 1)),
        "max_request_tokens": ("--max-request-tokens", args.max_request_tokens),
        "request_budget_s": ("--request-budget", args.request_budget),
        "body_timeout_s": ("--body-timeout", args.body_timeout),
        "header_timeout_s": ("--header-timeout", args.header_timeout),
    }
    try:
        limits = AuditLimits(**{name: value for name, (_, value) in flags.items()})
    except ValueError as exc:  # name the flag, not the field
        message = str(exc)
        for name, (flag, _) in flags.items():
            message = message.replace(name, flag, 1) if message.startswith(name) else message
        raise ValueError(message) from None
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be between 1 and 65535, got {args.port}")
    for flag, value in (("--db-timeout", args.db_timeout), ("--shutdown-timeout", args.shutdown_timeout)):
        if not 0 < value <= 3600:
            raise ValueError(f"{flag} must be between 0 and 3,600 seconds, got {value}")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.host not in LOOPBACK:
        sys.stderr.write(
            f"warning: binding {args.host}: the service is reachable from other machines; put it behind TLS.\n"
        )
    db = Path(args.db).expanduser() if args.db else default_db_path()
    store = AuditStore(db, store_text=not args.no_store_text, busy_timeout=args.db_timeout)  # a bad path fails first
    try:
        handle = load_handle(args)
        template_key = resolve_template(args.template, handle.tokenizer).key
        calibration, note = resolve_calibration(handle, template_key, args.calibration)
        app = create_app(
            handle, store, calibration, token, limits, template=args.template, calibration_note=note, docs=args.docs
        )
        docs = "docs at /docs: never paste the token there" if args.docs else "schema at /openapi.json"
        sys.stderr.write(
            f"audit service: {handle.info.name} on http://{args.host}:{args.port} ({docs})\n"
            f"  database:    {db}{' (hashes only, no texts)' if args.no_store_text else ''}\n"
            f"  calibration: {note}\n"
            f"  limits:      {limits.max_request_tokens:,} tokens and {limits.request_budget_s:g} s per request; "
            f"stops within {args.shutdown_timeout:g} s of SIGTERM\n"
        )
        run_server(
            app,
            host=args.host,
            port=args.port,
            on_stop=_stopper(app.state.recorder, store, args.shutdown_timeout),
            graceful_s=max(args.shutdown_timeout - 1.0, 0.5),
            header_timeout_s=limits.header_timeout_s,
            on_head_timeout=app.state.recorder.counters.head_timeout,
        )
    finally:
        store.close()
    return 0


def run_server(
    app: Any,
    *,
    host: str,
    port: int,
    on_stop: Callable[[], None],
    graceful_s: float,
    header_timeout_s: float = AuditLimits.header_timeout_s,
    on_head_timeout: Callable[[], None] | None = None,
) -> None:
    """Serve ``app`` with uvicorn until SIGTERM or SIGINT; ``on_stop()`` runs at the first signal (before uvicorn
    starts its graceful shutdown, which waits at most ``graceful_s`` seconds for requests in flight). Each request
    head must arrive within ``header_timeout_s`` (:func:`core.audit.protocol.head_timeout_protocol`; 408 and the
    connection closed after, ``on_head_timeout()`` called).

    The seam tests replace (``core.cli.commands.serve.run_server``) to talk to the app without a socket.
    """
    import uvicorn

    from core.audit.protocol import head_timeout_protocol

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            on_stop()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app,
        http=head_timeout_protocol(header_timeout_s, on_head_timeout),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=max(int(graceful_s), 1),
    )
    _Server(config).run()


def _stopper(recorder: Any, store: AuditStore, timeout_s: float) -> Callable[[], None]:
    """What the first signal does: stop the audits in flight, and make sure the process is gone within
    ``timeout_s`` (later signals do nothing more here)."""
    stopped = threading.Event()

    def stop() -> None:
        if stopped.is_set():
            return
        stopped.set()
        running = recorder.begin_shutdown()
        sys.stderr.write(f"audit service: stopping ({running} audit(s) in flight stop before their next pass)\n")
        threading.Thread(target=_exit_by, args=(time.monotonic() + timeout_s, store), daemon=True).start()

    return stop


def _exit_by(deadline: float, store: AuditStore) -> None:
    """Exit the process at ``deadline`` if it is still running (a forward pass that outlasts the shutdown): after
    any commit in progress, with none started after it (:meth:`AuditStore.halt`)."""
    time.sleep(max(deadline - time.monotonic(), 0.0))
    committed = store.halt(timeout=1.0)
    sys.stderr.write(
        "audit service: forced exit after the shutdown timeout (a forward pass was still running; nothing it "
        f"worked on was recorded){'' if committed else '; a commit did not finish in time'}\n"
    )
    sys.stderr.flush()
    logging.shutdown()
    os._exit(FORCED_EXIT_STATUS)
