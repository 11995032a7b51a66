"""The CRM audit service: FastAPI app, SQLite hash-chained store, per-deployment calibration."""
