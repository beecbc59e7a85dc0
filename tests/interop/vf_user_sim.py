"""A verifiers environment package whose own Env is verifiers' user simulator: multi-turn, a modeled user."""

from verifiers.v1.envs.user_sim import UserSimEnv
from vf_tasks import ReverseTaskset

__all__ = ["ReverseTaskset", "UserSimEnv"]
