"""Evaluation: pass@k over an env's task set (``runner``) and the agent-behaviour metrics it reports
(``behaviour``).
"""

from agentrl.evaluation.runner import (
    EvalReport,
    TaskResult,
    evaluate,
    pass_at_k,
    summarize,
)

__all__ = [
    "EvalReport",
    "TaskResult",
    "evaluate",
    "pass_at_k",
    "summarize",
]
