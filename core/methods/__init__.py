"""core.methods."""
