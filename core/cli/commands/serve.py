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
See docs/audit.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from core.audit.auth import AuditLimits, load_token
from core.audit.calibration import resolve_calibration
from core.audit.store import DB_ENV, AuditStore, default_db_path
from core.cli.common import add_model_args, load_handle
from core.model.prompts import resolve_template

logger = logging.getLogger(__name__)

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


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
    import uvicorn

    from core.audit.service import create_app

    token = load_token(args.token_file)
    limits = AuditLimits(
        max_body_bytes=args.max_body_bytes,
        max_batch_items=args.max_batch,
        max_prompt_tokens=args.max_prompt_tokens,
        max_new_tokens=max(args.max_new_tokens, 1),
    )
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be between 1 and 65535, got {args.port}")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.host not in LOOPBACK:
        sys.stderr.write(
            f"warning: binding {args.host}: the service is reachable from other machines; put it behind TLS.\n"
        )
    db = Path(args.db).expanduser() if args.db else default_db_path()
    handle = load_handle(args)
    template_key = resolve_template(args.template, handle.tokenizer).key
    calibration, note = resolve_calibration(handle, template_key, args.calibration)
    store = AuditStore(db, store_text=not args.no_store_text)
    app = create_app(
        handle, store, calibration, token, limits, template=args.template, calibration_note=note, docs=args.docs
    )
    docs = "docs at /docs: never paste the token there" if args.docs else "schema at /openapi.json"
    sys.stderr.write(
        f"audit service: {handle.info.name} on http://{args.host}:{args.port} ({docs})\n"
        f"  database:    {db}{' (hashes only, no texts)' if args.no_store_text else ''}\n"
        f"  calibration: {note}\n"
    )
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    finally:
        store.close()
    return 0
