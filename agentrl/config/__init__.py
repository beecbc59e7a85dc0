"""Run configuration: pydantic models, YAML loading and CLI overrides."""
