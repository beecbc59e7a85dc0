"""Inference engines behind one async token-in/token-out protocol."""
