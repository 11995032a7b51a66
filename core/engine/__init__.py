"""core.engine."""
