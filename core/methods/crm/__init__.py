"""core.methods.crm."""
