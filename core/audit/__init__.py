"""The CRM audit service: FastAPI app, SQLite hash-chained store, per-deployment calibration.

CRM appendix V's deployment prototype made production-grade (docs/audit.md):

* :mod:`~core.audit.forward` — one left-padded forward pass per path, hidden states at the last prompt token
  and the first answer token's distributions; the model's weight fingerprint;
* :mod:`~core.audit.calibration` — :class:`~core.audit.calibration.AuditCalibration`: PC1, μ_ℓ, σ_ℓ and the
  anomaly flag's threshold from a deployment's clean rows (or the model's CRM basis);
* :mod:`~core.audit.scoring` — validating pairs and scoring them (the audit rule of appendix V.1);
* :mod:`~core.audit.store` — the SQLite (WAL) log: appends checked against the stored head, ``request_id``s
  bound to their request;
* :mod:`~core.audit.chain` — the hash chain: canonical JSON, the head check, the walk behind ``verify``;
* :mod:`~core.audit.reader` — read-only access (no write access needed) and :func:`~core.audit.reader.verify_chain`;
* :mod:`~core.audit.auth` and :mod:`~core.audit.service` — the bearer token, the limits and
  :func:`~core.audit.service.create_app`.

Nothing is imported here, so the dashboard can read the log (:mod:`core.audit.reader`, no torch) cheaply.
"""
