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

__all__ = [
    "ChatAssembler",
    "TemplateMismatch",
    "fingerprint",
    "template_supports_tools",
    "tools_system_prompt",
    "with_tools_prompt",
]
