"""What an episode records: its token segments and turns (``episode``) and the token ledger that
builds them from a conversation (``ledger``).
"""

from agentrl.trajectory.episode import (
    Episode,
    EpisodeStatus,
    TokenSegment,
    TurnRecord,
)

__all__ = [
    "Episode",
    "EpisodeStatus",
    "TokenSegment",
    "TurnRecord",
]
