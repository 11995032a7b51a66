"""core.methods.ablation."""
