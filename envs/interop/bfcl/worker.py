"""The BFCL side of the bridge: runs in BFCL's own venv (stdlib + the installed ``bfcl-eval`` only).

Reads one JSON request per line on stdin, writes one JSON reply per line on the original stdout
(BFCL's simulated APIs may print: ``sys.stdout`` goes to stderr). Everything BFCL-specific happens
here with BFCL's own functions: loading entries and ground truth (``load_dataset_entry``,
``load_ground_truth_entry``), converting function docs to tools (``convert_to_tool``), turning calls
into the call strings BFCL executes (``convert_to_function_call``), executing them against the
simulated API instances (``execute_multi_turn_func_call``) and grading (``multi_turn_checker``).

BFCL's executor ``eval``s the call string, so a call naming a builtin (``exec``) or an argument name
that smuggles code would run anything in this process, grader included. A call runs only when it
parses as ``f(k=<literal>, ...)`` with ``f`` one of the functions offered so far; any other is
answered with the text BFCL's harness gives (``Error during execution: ...``) and not executed;
a name eval cannot resolve runs in BFCL's executor, which answers it (and records it) as it always does.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import sys
import traceback
from typing import Any

PROTOCOL = 1


class Episode:
    """One episode: its entry, the functions offered so far and the calls executed per turn and step."""

    def __init__(self, key: str, entry: dict[str, Any], ground_truth: list[list[str]], tools: Any) -> None:
        self.key = key
        self.entry = entry
        self.ground_truth = ground_truth
        self.allowed = {doc["name"] for doc in entry["function"]}
        self.hidden = {doc["name"] for docs in entry.get("missed_function", {}).values() for doc in docs}
        self.tools = tools
        self.decoded: list[list[list[str]]] = []  # per turn, per step: the call strings executed
        self.verdicts: list[bool] = []  # the checker's verdict on turns 0..t, per ended turn t
        self.error: dict[str, str] | None = None  # the checker's first failure

    @property
    def model_name(self) -> str:
        return f"agentrl_{self.key}"


class Worker:
    """Holds BFCL's entries by category and the open episodes; one method per request op."""

    def __init__(self) -> None:
        from bfcl_eval.constants.default_prompts import (
            DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING,
            MAXIMUM_STEP_LIMIT,
        )
        from bfcl_eval.constants.enums import ModelStyle
        from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
        from bfcl_eval.model_handler.utils import convert_to_function_call, convert_to_tool
        from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

        self.reveal_prompt = DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING
        self.max_steps = MAXIMUM_STEP_LIMIT
        self.utils = multi_turn_utils
        self.checker = multi_turn_checker
        self.to_call = convert_to_function_call
        self.to_tools = lambda docs: convert_to_tool(docs, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)
        self.load_entries = load_dataset_entry
        self.load_truth = load_ground_truth_entry
        self.entries: dict[str, dict[str, Any]] = {}
        self.truth: dict[str, list[list[str]]] = {}
        self.episodes: dict[str, Episode] = {}
        self.loaded: set[str] = set()
        self.counter = 0

    def op_hello(self) -> dict[str, Any]:
        from importlib.metadata import version

        return {"protocol": PROTOCOL, "bfcl_eval": version("bfcl-eval"), "max_steps": self.max_steps}

    def _load(self, category: str) -> None:
        if category in self.loaded:
            return
        self.loaded.add(category)
        for entry in self.load_entries(category):
            self.entries[entry["id"]] = entry
        for row in self.load_truth(category):
            self.truth[row["id"]] = row["ground_truth"]

    def op_ids(self, categories: list[str]) -> dict[str, Any]:
        ids = []
        for category in categories:
            self._load(category)
            ids += [key for key in self.entries if key.rsplit("_", 1)[0] == category]
        return {"ids": ids}

    def _long_context(self, entry: dict[str, Any]) -> bool:
        category = entry["id"].rsplit("_", 1)[0]  # as BFCL's harness and checker decide it
        return "long_context" in category or "composite" in category

    def _instance_names(self, model_name: str, entry: dict[str, Any]) -> list[str]:
        """The module globals BFCL's executor keeps an entry's instances under (its own naming)."""
        names = []
        for class_name in entry["involved_classes"]:
            raw = f"{model_name}_{entry['id']}_{class_name}_instance"
            names.append(re.sub(r"[-./:]", "_", raw))
        return names

    def _forget(self, model_name: str, entry: dict[str, Any]) -> None:
        namespace = vars(self.utils)
        for name in self._instance_names(model_name, entry):
            namespace.pop(name, None)

    def op_start(self, entry_id: str) -> dict[str, Any]:
        self._load(entry_id.rsplit("_", 1)[0])
        entry = self.entries[entry_id]
        self.counter += 1
        key = f"e{self.counter}"
        episode = Episode(key, entry, self.truth[entry_id], self.to_tools(entry["function"]))
        self.episodes[key] = episode
        # No call, as BFCL's harness does first: creates the entry's instances from its initial config.
        self.utils.execute_multi_turn_func_call(
            [],
            entry.get("initial_config", {}),
            entry["involved_classes"],
            episode.model_name,
            entry_id,
            long_context=self._long_context(entry),
            is_evaL_run=False,
        )
        return {"episode": key, "question": entry["question"], "tools": episode.tools, "turns": len(entry["question"])}

    def op_turn(self, episode: str, turn: int) -> dict[str, Any]:
        """Open turn ``turn``: its user messages, with a missing function revealed where BFCL reveals one."""
        state = self.episodes[episode]
        if turn != len(state.decoded):
            raise ValueError(f"turn {turn} opened after {len(state.decoded)} turns")
        state.decoded.append([])
        messages = state.entry["question"][turn]
        missed = state.entry.get("missed_function", {}).get(str(turn))
        tools: list[Any] = []
        if missed:
            state.allowed |= {doc["name"] for doc in missed}
            state.hidden -= state.allowed
            tools = self.to_tools(missed)
            # BFCL's harness for models whose tools live in the prompt: the docs, then its fixed question.
            messages = [{"role": "user", "content": self.reveal_prompt.format(functions=missed)}]
        return {"messages": messages, "tools": tools}

    def _refusal(self, call: str, allowed: set[str], hidden: set[str]) -> str | None:
        """Why ``call`` must not reach BFCL's ``eval`` (None: safe to run there).

        Safe: a syntax error (eval fails before running anything), or ``f(k=<literal>, ...)`` where ``f`` is
        offered, or names nothing eval could find (BFCL's executor then answers its own NameError). Refused:
        a builtin or a global of BFCL's executor, and a method of the entry's classes not offered yet.
        """
        try:
            tree = ast.parse(call, filename="<string>", mode="eval")
        except SyntaxError:
            return None
        node = tree.body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            return "the call must be a single function call"
        name = node.func.id
        if name not in allowed and (hasattr(builtins, name) or name in vars(self.utils) or name in hidden):
            return f"name '{name}' is not defined"  # what eval says for a name it does not know
        for value in [*node.args, *(k.value for k in node.keywords)]:
            try:
                ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return f"argument {ast.unparse(value)!r} of {name} is not a literal value"
        if any(k.arg is None for k in node.keywords):
            return f"{name}() takes named arguments only"
        return None

    def op_execute(self, episode: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
        """Run one step's calls in order; returns one result text per call and records the calls run."""
        state = self.episodes[episode]
        entry = state.entry
        results: list[str] = []
        executed: list[str] = []
        for call in calls:
            try:
                text = self.to_call([{call["name"]: call["arguments"]}])[0]
            except Exception as exc:  # noqa: BLE001 - BFCL's own decoding failure, shown as its executor shows errors
                results.append(f"Error during execution: {exc}")
                continue
            refusal = self._refusal(text, state.allowed, state.hidden)
            if refusal is not None:
                results.append(f"Error during execution: {refusal}")
                continue
            outputs, _ = self.utils.execute_multi_turn_func_call(
                [text],
                entry.get("initial_config", {}),
                entry["involved_classes"],
                state.model_name,
                entry["id"],
                long_context=self._long_context(entry),
                is_evaL_run=False,
            )
            results.append(outputs[0])
            executed.append(text)
        if executed:
            state.decoded[-1].append(executed)
        return {"results": results, "executed": executed}

    def op_check(self, episode: str) -> dict[str, Any]:
        """BFCL's checker on the turns opened so far (earlier turns' verdicts were checked when they ended)."""
        state = self.episodes[episode]
        for upto in range(len(state.verdicts) + 1, len(state.decoded) + 1):
            result = self.grade(state.entry, state.ground_truth[:upto], state.decoded[:upto])
            state.verdicts.append(bool(result["valid"]))
            state.error = state.error or _error_of(result)
        return {"verdicts": state.verdicts, "error": state.error, "decoded": state.decoded}

    def grade(self, entry: dict[str, Any], truth: list[list[str]], decoded: list[list[list[str]]]) -> dict[str, Any]:
        """``multi_turn_checker`` under a name no other check shares; its instances are dropped after."""
        self.counter += 1
        name = f"agentrl_check{self.counter}"
        try:
            return self.checker(decoded, truth, entry, entry["id"].rsplit("_", 1)[0], name)
        finally:
            self._forget(f"{name}_eval", entry)
            self._forget(f"{name}_ground_truth_eval", entry)

    def op_grade(self, entry_id: str, decoded: list[list[list[str]]]) -> dict[str, Any]:
        """BFCL's checker on a whole entry's calls (the reference path of the agreement tests)."""
        self._load(entry_id.rsplit("_", 1)[0])
        result = self.grade(self.entries[entry_id], self.truth[entry_id], decoded)
        return {"valid": bool(result["valid"]), "error": _error_of(result)}

    def op_end(self, episode: str) -> dict[str, Any]:
        state = self.episodes.pop(episode, None)
        if state is not None:
            self._forget(state.model_name, state.entry)
        return {}


def _error_of(result: dict[str, Any]) -> dict[str, str] | None:
    if result.get("valid"):
        return None
    return {"type": str(result.get("error_type", "")), "message": str(result.get("error_message", ""))}


def main() -> None:
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints of the simulated APIs stay off the protocol
    sys.stdout = sys.stderr
    worker = Worker()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.pop("op")
        try:
            reply = {"ok": True, **getattr(worker, f"op_{op}")(**request)}
        except Exception as exc:  # noqa: BLE001 - reported to the client, which raises it with the traceback
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        out.write(json.dumps(reply, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
