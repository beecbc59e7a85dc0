"""BFCL-MultiTurn-v0: BFCL's multi-turn categories, executed and graded by the installed ``bfcl-eval``."""
