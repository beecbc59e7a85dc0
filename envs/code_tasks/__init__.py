"""Procedurally generated coding tasks: families with seeded parameters, visible examples, hidden tests.

``generate_tasks(GeneratorConfig(seed=0), "train")`` returns the tasks of a split; the same config gives
byte-identical tasks. ``agentrl/CodeAgent-v0`` (``envs.code_agent``) trains and evaluates on them.
"""

from envs.code_tasks.families import FAMILIES
from envs.code_tasks.generator import DEFAULT_HELDOUT, GeneratorConfig, generate_tasks, write_jsonl
from envs.code_tasks.task import Case, GeneratedTask

__all__ = ["DEFAULT_HELDOUT", "FAMILIES", "Case", "GeneratedTask", "GeneratorConfig", "generate_tasks", "write_jsonl"]
