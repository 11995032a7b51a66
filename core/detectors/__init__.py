"""core.detectors."""
