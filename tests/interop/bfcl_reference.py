"""BFCL's own evaluation of scripted trajectories, run in BFCL's venv: the reference of the agreement tests.

``python bfcl_reference.py scripts IN OUT``: for each entry id in IN (a JSON list), the scripted
trajectories as model texts per turn and step, built from BFCL's ground truth (calls in the
``<tool_call>`` format of BFCL's Qwen FC handler; positional ground-truth arguments named from BFCL's
function docs). ``python bfcl_reference.py grade IN OUT``: for each ``{entry_id, turns}`` in IN, the
verdict BFCL's evaluation gives those texts: each step decoded by BFCL's ``QwenFCHandler.decode_execute``
(steps that fail to decode or decode to nothing skipped, as ``eval_runner`` skips them) and graded by
``multi_turn_checker``, once for the whole entry and once per turn prefix, each in a fresh name.
``python bfcl_reference.py execute IN OUT``: BFCL's ``execute_multi_turn_func_call`` on
``{entry_id, calls}`` (call strings) from the entry's initial state: the texts its harness returns.
"""

from __future__ import annotations

import ast
import json
import sys
from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call
from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler
from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

CATEGORY = {}
ENTRIES: dict[str, dict[str, Any]] = {}
TRUTH: dict[str, list[list[str]]] = {}
HANDLER = QwenFCHandler("agentrl-reference", 0.0, "agentrl-reference", True)


def load(entry_id: str) -> None:
    category = entry_id.rsplit("_", 1)[0]
    if category in CATEGORY:
        return
    CATEGORY[category] = True
    ENTRIES.update({e["id"]: e for e in load_dataset_entry(category)})
    TRUTH.update({r["id"]: r["ground_truth"] for r in load_ground_truth_entry(category)})


def tool_call(call: str, docs: dict[str, list[str]]) -> str:
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), call
    arguments = dict(zip(docs[node.func.id], (ast.literal_eval(a) for a in node.args)))
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return "<tool_call>\n" + json.dumps({"name": node.func.id, "arguments": arguments}) + "\n</tool_call>"


def replies(calls: list[str], docs: dict[str, list[str]]) -> list[str]:
    """One turn of a scripted model: all the calls in one reply, then a reply without calls."""
    return (["\n".join(tool_call(c, docs) for c in calls)] if calls else []) + ["Done."]


def scripts(entry_id: str) -> dict[str, list[list[str]]]:
    load(entry_id)
    entry, truth = ENTRIES[entry_id], TRUTH[entry_id]
    all_docs = entry["function"] + [d for ds in entry.get("missed_function", {}).values() for d in ds]
    docs = {d["name"]: list(d["parameters"]["properties"]) for d in all_docs}
    gt = [replies(calls, docs) for calls in truth]
    first = next(i for i, calls in enumerate(truth) if calls)
    last = max(i for i, calls in enumerate(truth) if calls)
    wrong_call = truth[last][0].split("(")[0] + "(" + ")"  # the turn's first function, arguments dropped
    wrong = [list(turn) for turn in gt]
    wrong[last] = replies([wrong_call, *truth[last][1:]], docs)
    empty = [list(turn) for turn in gt]
    empty[first] = ["I cannot help with that."]
    malformed = [list(turn) for turn in gt]
    good = malformed[first][0]
    malformed[first] = [
        '<tool_call>\n{"arguments": {}}\n</tool_call>',  # no name: BFCL's decoder fails the whole reply
        "<tool_call>\n{not json\n</tool_call>\n" + good,  # unparsable block dropped, the others run
        "<tool_call>\n" + json.dumps({"name": "no_such_function", "arguments": {"x": 1}}) + "\n</tool_call>",
        "Done.",
    ]
    return {"ground_truth": gt, "one_call_wrong": wrong, "empty_turn": empty, "malformed": malformed}


def decode(turns: list[list[str]]) -> list[list[list[str]]]:
    decoded = []
    for texts in turns:
        steps = []
        for text in texts:
            try:
                calls = HANDLER.decode_execute(text, has_tool_call_tag=False)
            except Exception:  # noqa: BLE001 - eval_runner skips a reply that fails to decode
                continue
            if calls:
                steps.append(calls)
        decoded.append(steps)
    return decoded


def grade(entry_id: str, turns: list[list[str]], name: str) -> dict[str, Any]:
    load(entry_id)
    entry, truth = ENTRIES[entry_id], TRUTH[entry_id]
    decoded = decode(turns)
    category = entry_id.rsplit("_", 1)[0]
    whole = multi_turn_checker(decoded, truth, entry, category, name)
    prefixes = [
        bool(multi_turn_checker(decoded[:n], truth[:n], entry, category, f"{name}_upto{n}")["valid"])
        for n in range(1, len(truth) + 1)
    ]
    return {"valid": bool(whole["valid"]), "prefixes": prefixes, "decoded": decoded}


def execute(entry_id: str, calls: list[str], name: str) -> list[str]:
    load(entry_id)
    entry = ENTRIES[entry_id]
    long_context = "long_context" in entry_id
    results, _ = execute_multi_turn_func_call(
        calls, entry["initial_config"], entry["involved_classes"], name, entry_id, long_context=long_context
    )
    return results


def main() -> None:
    mode, source, target = sys.argv[1:4]
    rows = json.loads(open(source).read())
    if mode == "scripts":
        out: Any = {entry_id: scripts(entry_id) for entry_id in rows}
    elif mode == "grade":
        out = [grade(row["entry_id"], row["turns"], f"reference{i}") for i, row in enumerate(rows)]
    else:
        out = [execute(row["entry_id"], row["calls"], f"reference_exec{i}") for i, row in enumerate(rows)]
    open(target, "w").write(json.dumps(out))


if __name__ == "__main__":
    main()
