"""Modules that moved (issue 35's floor plan): old import path -> new one.

Each old path is a shim (``agentrl._compat.moved``) that is the new module and warns; the shims go in
the next release. tests/test_moved_modules.py checks every entry and that the repository uses none.
"""

MOVED: dict[str, str] = {
    "agentrl.behaviour": "agentrl.evaluation.behaviour",
    "agentrl.credit": "agentrl.algos.credit",
    "agentrl.disk": "agentrl.util.disk",
    "agentrl.env_contract": "agentrl.env.contract",
    "agentrl.heap": "agentrl.util.heap",
    "agentrl.ledger": "agentrl.trajectory.ledger",
    "agentrl.mcp_tools": "agentrl.tools.mcp",
    "agentrl.messages": "agentrl.chat.messages",
    "agentrl.registry": "agentrl.env.registry",
    "agentrl.rundir": "agentrl.rollout.rundir",
    "agentrl.sft": "agentrl.trainer.sft",
    "agentrl.spaces": "agentrl.env.spaces",
    "agentrl.stats": "agentrl.util.stats",
    "agentrl.toolcall": "agentrl.tools.toolcall",
}
