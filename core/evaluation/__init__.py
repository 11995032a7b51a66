"""core.evaluation."""
