"""Multi-turn rollout orchestration and the durable partial-rollout buffer.

``RolloutOrchestrator.collect_step`` returns B complete groups per step; partial episodes, ready
groups and the dataset cursor survive a killed job in ``RolloutBuffer`` (SQLite, one transaction
per step boundary).
"""

from agentrl.rollout.buffer import RolloutBuffer, StoredGroup
from agentrl.rollout.dataset import TaskDataset, task_seed
from agentrl.rollout.orchestrator import RolloutOrchestrator, StepBatch

__all__ = ["RolloutBuffer", "RolloutOrchestrator", "StepBatch", "StoredGroup", "TaskDataset", "task_seed"]
