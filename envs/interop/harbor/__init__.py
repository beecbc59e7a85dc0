"""Harbor-format tasks (instruction.md, task.toml, environment/, tests/test.sh) in hardened Docker sandboxes."""

from envs.interop.harbor.env import HarborEnv
from envs.interop.harbor.tasks import HarborTask, load_harbor_tasks

__all__ = ["HarborEnv", "HarborTask", "load_harbor_tasks"]
