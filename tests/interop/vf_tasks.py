"""A small verifiers (v1) taskset built locally for the interop tests: reverse a word (no hub, no dataset download)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from difflib import SequenceMatcher

import verifiers.v1 as vf

WORDS = ["agent", "reward", "policy", "token", "sandbox", "gradient"]


class ReverseData(vf.TaskData):
    """A word and its reversal."""

    answer: str


class ReverseTask(vf.Task[ReverseData]):
    """Reward: 1 for the exact reversal (weight 1) plus 0.5 x character similarity (weight 0.5)."""

    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == self.data.answer)

    @vf.reward(weight=0.5)
    async def similarity(self, trace: vf.Trace) -> float:
        return SequenceMatcher(None, trace.last_reply.strip(), self.data.answer).ratio()

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class ReverseConfig(vf.TasksetConfig):
    """How many words to use."""

    num_words: int = len(WORDS)


class ReverseTaskset(vf.Taskset[ReverseTask, ReverseConfig]):
    """Reverse each word, character by character."""

    def load(self) -> list[ReverseTask]:
        return [
            ReverseTask(
                ReverseData(
                    id=f"rev-{w}",
                    prompt=f"Reverse the word: {w}",
                    system_prompt="Answer with the word only.",
                    answer=w[::-1],
                ),
                self.config.task,
            )
            for w in WORDS[: self.config.num_words]
        ]


class NeedsRuntimeTask(ReverseTask):
    """A reward that reads the agent's container: not available outside verifiers' rollout loop."""

    @vf.reward
    async def file_exists(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        return 1.0


class NeedsRuntimeTaskset(vf.Taskset[NeedsRuntimeTask, vf.TasksetConfig]):
    """One task whose scoring needs a runtime."""

    def load(self) -> list[NeedsRuntimeTask]:
        return [NeedsRuntimeTask(ReverseData(prompt="Reverse: ab", answer="ba"), self.config.task)]


class EndlessTaskset(vf.Taskset[ReverseTask, vf.TasksetConfig]):
    """Words without end, as a generator (Taskset.INFINITE): only a `limit` makes it a task list."""

    INFINITE = True

    def load(self) -> Iterator[ReverseTask]:
        for n in itertools.count():
            word = f"{WORDS[n % len(WORDS)]}{n}"
            yield ReverseTask(
                ReverseData(id=f"end-{n}", prompt=f"Reverse: {word}", answer=word[::-1]), self.config.task
            )


class ImageTaskset(vf.Taskset[ReverseTask, vf.TasksetConfig]):
    """A prompt with an image part: not something a text-only policy can read."""

    def load(self) -> list[ReverseTask]:
        parts = [
            vf.TextContentPart(type="text", text="Reverse the word in the picture."),
            vf.ImageUrlContentPart(type="image_url", image_url=vf.ImageUrlSource(url="data:image/png;base64,AA==")),
        ]
        data = ReverseData(id="img-0", prompt=[vf.UserMessage(content=parts)], answer="tnega")
        return [ReverseTask(data, self.config.task)]
