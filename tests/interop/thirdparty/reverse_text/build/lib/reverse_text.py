"""reverse-text: reverse a short text character by character, scored by longest-common-subsequence similarity.

Written as verifiers environments are published (an ``environments/<name>/`` folder with its own
pyproject, installed as a package whose ``__all__`` exports the Taskset): ``vf eval reverse-text``
and ``vf.load_environment`` find it by its id. The texts are inline, so nothing is downloaded.
"""

from __future__ import annotations

from difflib import SequenceMatcher

import verifiers.v1 as vf

TEXTS = ["hello world", "policy gradient", "reward model", "token budget", "sandbox escape", "value head"]


class ReverseTextData(vf.TaskData):
    """A text and its reversal."""

    answer: str


class ReverseTextTask(vf.Task[ReverseTextData]):
    """LCS similarity of the reply to the reversed text (1.0 exactly when it matches)."""

    @vf.reward(weight=1.0)
    async def lcs_ratio(self, trace: vf.Trace) -> float:
        return SequenceMatcher(None, trace.last_reply.strip(), self.data.answer).ratio()


class ReverseTextConfig(vf.TasksetConfig):
    """How many texts to use."""

    num_texts: int = len(TEXTS)


class ReverseTextTaskset(vf.Taskset[ReverseTextTask, ReverseTextConfig]):
    """Reverse each text."""

    def load(self) -> list[ReverseTextTask]:
        return [
            ReverseTextTask(
                ReverseTextData(
                    id=f"reverse-{i}",
                    prompt=f"Reverse the text character by character: {text}",
                    system_prompt="Reply with the reversed text only.",
                    answer=text[::-1],
                ),
                self.config.task,
            )
            for i, text in enumerate(TEXTS[: self.config.num_texts])
        ]


__all__ = ["ReverseTextTaskset"]
