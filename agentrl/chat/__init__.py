"""Chat assembly: messages (``messages``) and their rendering to token ids, turn by turn, through the
model's chat template (``assembler``: ``ChatAssembler``).
"""

from agentrl.chat.assembler import (
    ChatAssembler,
    TemplateMismatch,
    fingerprint,
    template_supports_tools,
    tools_system_prompt,
    with_tools_prompt,
)
from agentrl.chat.messages import Message  # the old agentrl.chat module exposed it too

__all__ = [
    "Message",
    "ChatAssembler",
    "TemplateMismatch",
    "fingerprint",
    "template_supports_tools",
    "tools_system_prompt",
    "with_tools_prompt",
]
