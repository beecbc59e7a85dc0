"""Concrete agentrl environments (join agentrl env API with sandboxes)."""
