"""Canary episodes (``info["canary"]``): marked when the env says so, flagged and reported when one passes.

A canary is a task no honest answer can pass, mixed in by the env to measure reward hacking while training
(``agentrl.env.CANARY``). A pass means the reward was forged: the episode gets a ``canary_passed`` hack flag
(shown by ``agentrl inspect --flagged``) and the first pass of the process is logged as an error, loudly; the
trainer keeps canaries out of the loss (``agentrl.trainer.batch``) and logs their pass rate.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from agentrl.trajectory import Episode

log = logging.getLogger(__name__)
PASSED_FLAG = "canary_passed"
_first_pass = threading.Event()


def note_canary(episode: Episode, info: dict[str, Any]) -> None:
    """Mark the episode a canary when a reset's or step's info says it is one."""
    if info.get("canary"):  # agentrl.env.CANARY
        episode.canary = True


def check_canary(episode: Episode) -> None:
    """On a finished episode: flag a canary that passed, and warn (the first time of the process, loudly)."""
    if not episode.canary_passed:
        return
    flag = f"{PASSED_FLAG}: task {episode.task_id!r} passed, final reward {episode.final_reward}; no honest answer can"
    if flag not in episode.hack_flags:
        episode.hack_flags.append(flag)
    if not _first_pass.is_set():
        _first_pass.set()
        log.error(
            "\n%s\nREWARD HACKING: canary task %r PASSED (episode %s, final reward %s). No honest answer can pass a "
            "canary: the policy found a way to forge its reward. Inspect it with `agentrl inspect RUN --flagged`; "
            "integrity/canary_pass_rate tracks it per step. (Further passes are flagged, logged once each.)\n%s",
            "!" * 100,
            episode.task_id,
            episode.episode_id,
            episode.final_reward,
            "!" * 100,
        )
    else:
        log.warning("canary task %r passed (episode %s): a forged reward", episode.task_id, episode.episode_id)
