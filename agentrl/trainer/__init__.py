"""The policy trainer: update loop, weight sync, checkpoints, logging."""
