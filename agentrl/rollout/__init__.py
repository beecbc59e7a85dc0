"""Multi-turn rollout orchestration and the durable partial-rollout buffer."""
