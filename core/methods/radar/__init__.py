"""core.methods.radar."""
