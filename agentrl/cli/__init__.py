"""The agentrl command line."""
