"""Model builders and loaders (tiny local models, SmolLM2 conversion)."""
