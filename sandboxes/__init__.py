"""Sandboxes for untrusted code: hardened Docker containers and a process fallback. Knows nothing of RL."""
