"""Per-step rollout metrics: episode counts, staleness histogram, tokens and where time went.

Times are sums over concurrent episodes (engine/env/sandbox seconds can exceed the wall time).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from agentrl.trajectory import Episode


@dataclass
class RolloutMetrics:
    """Counters of one collection step; ``as_dict`` names them ``rollout/<name>``."""

    started: int = 0
    completed: int = 0
    aborted: int = 0
    resumed: int = 0
    restarted: int = 0
    dropped: int = 0
    stale_discarded_tokens: int = 0  # sampled tokens thrown away when a too-stale episode restarted
    failed: int = 0
    groups_dropped: int = 0
    groups_filtered: int = 0  # dynamic sampling: complete groups without signal, replaced
    infra_failures: int = 0  # episodes the env could not score for a reason outside the policy (left out)
    tokens_generated: int = 0
    prompt_tokens: int = 0  # prompt tokens sent to the engine
    cached_prompt_tokens: int = 0  # of those, tokens the engine did not recompute (prefix reuse)
    new_prompt_tokens: int = 0  # of those, tokens the episode had not sent to these weights before
    recomputed_prompt_tokens: int = 0  # computed although sent before: what a larger prefix cache would save
    engine_time_s: float = 0.0
    env_time_s: float = 0.0
    sandbox_time_s: float = 0.0
    staleness: Counter[int] = field(default_factory=Counter)

    def as_dict(self, wall_s: float) -> dict[str, float]:
        """Flat float metrics; ``rollout/staleness_<k>`` counts trained episodes k versions behind."""
        out: dict[str, float] = {
            f"rollout/episodes_{name}": float(getattr(self, name))
            for name in ("started", "completed", "aborted", "resumed", "restarted", "dropped", "failed")
        }
        out["rollout/groups_dropped"] = float(self.groups_dropped)
        out["rollout/groups_filtered"] = float(self.groups_filtered)
        out["rollout/infra_failures"] = float(self.infra_failures)
        out["rollout/stale_discarded_tokens"] = float(self.stale_discarded_tokens)
        out["rollout/tokens_generated"] = float(self.tokens_generated)
        out["rollout/prompt_tokens"] = float(self.prompt_tokens)
        # prefill work: tokens the engine computed vs copied from its prefix cache (or a running twin's head)
        out["rollout/computed_prompt_tokens"] = float(self.prompt_tokens - self.cached_prompt_tokens)
        out["rollout/new_prompt_tokens"] = float(self.new_prompt_tokens)
        out["rollout/recomputed_prompt_tokens"] = float(self.recomputed_prompt_tokens)
        out["rollout/cached_prompt_frac"] = (
            self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        )
        out["rollout/engine_time_s"] = self.engine_time_s
        out["rollout/env_time_s"] = self.env_time_s
        out["rollout/sandbox_time_s"] = self.sandbox_time_s
        out["rollout/wall_s"] = wall_s
        out["rollout/tokens_per_s"] = self.tokens_generated / wall_s if wall_s > 0 else 0.0
        for lag, count in sorted(self.staleness.items()):
            out[f"rollout/staleness_{lag}"] = float(count)
        out["rollout/staleness_max"] = float(max(self.staleness, default=0))
        return out


@dataclass
class SentTokens:
    """The tokens whose keys/values the engine computed for one episode's last request, under which weights.

    Each turn's prompt extends the previous prompt and reply (history is never re-tokenized), so only the tokens
    after that head are new to the engine; computing more than those is work the prefix cache could have saved.
    A weight update flushes the engine's cache, so the head counts only while the version is the same.
    """

    tokens: list[int] = field(default_factory=list)
    version: int | None = None

    def count(self, metrics: RolloutMetrics, prompt: list[int], version: int, computed: int) -> None:
        """Add this request's new and needlessly recomputed prompt tokens to ``metrics``."""
        head = 0
        if version == self.version:
            limit = min(len(prompt), len(self.tokens))
            while head < limit and prompt[head] == self.tokens[head]:
                head += 1
        new = len(prompt) - head
        metrics.new_prompt_tokens += new
        metrics.recomputed_prompt_tokens += max(0, computed - new)

    def sent(self, prompt: list[int], output: list[int], version: int) -> None:
        """Remember the request the engine just served: its prompt and every output token but the last, which was
        sampled but never fed through the model (the next turn computes it)."""
        self.tokens, self.version = [*prompt, *output[:-1]], version


def success_rate(episodes: Iterable[Episode]) -> float:
    """The share of scored episodes (no canary, no infrastructure failure) that succeeded; 0 without any.

    The orchestrator passes every group a step completed, the ones dynamic sampling filtered out too: it keeps the
    groups that mix successes and failures, so the trained batch's own rate (``episode/success_rate``) leans to 0.5.
    """
    scored = [e for e in episodes if not e.canary and e.infra_failure is None]
    return sum(e.success for e in scored) / len(scored) if scored else 0.0
