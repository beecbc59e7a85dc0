"""CodeExec-v0: sandboxed multi-turn coding tasks graded by hidden tests."""

from envs.code_exec.config import CodeExecConfig
from envs.code_exec.env import CodeExecEnv
from envs.code_exec.tasks import CodingTask, load_tasks

__all__ = ["CodeExecConfig", "CodeExecEnv", "CodingTask", "load_tasks"]
