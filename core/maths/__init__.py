"""core.maths."""
