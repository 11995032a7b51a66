"""core.methods.sma."""
