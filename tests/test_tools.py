"""Tools: schemas from typed signatures, the Qwen/Hermes tool-call parser, execution, tools prompt."""

from __future__ import annotations

import json
import random
from typing import Literal

import pytest

from agentrl.errors import ConfigError
from agentrl.models.loading import load_tokenizer
from agentrl.tools import as_tool, execute_tool_calls, template_supports_tools, tools_system_prompt, with_tools_prompt
from agentrl.tools.toolcall import format_tool_call, has_tool_call, parse_tool_calls


def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number,
            which defaults to two.
    """
    return a + b


def shout(text: str, style: Literal["upper", "title"] = "upper") -> dict:
    """Change the case of a text."""
    return {"text": text.upper() if style == "upper" else text.title()}


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


def test_schema_comes_from_signature_and_docstring() -> None:
    assert as_tool(add).schema == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "The first number."},
                    "b": {"type": "integer", "default": 2, "description": "The second number, which defaults to two."},
                },
                "required": ["a"],
            },
        },
    }
    assert as_tool(shout).schema["function"]["parameters"]["properties"]["style"]["enum"] == ["upper", "title"]


def test_tool_definitions_without_hints_or_docstrings_are_rejected() -> None:
    def untyped(x):  # noqa: ANN001, ANN202 - the point of the test
        """Doc."""

    def undocumented(x: int) -> int:
        return x

    with pytest.raises(ConfigError, match="'untyped' parameter 'x' has no type hint"):
        as_tool(untyped)
    with pytest.raises(ConfigError, match="'undocumented' has no docstring"):
        as_tool(undocumented)


def test_parser_reads_well_formed_calls_in_order() -> None:
    text = (
        f"Let me compute.\n{format_tool_call('add', {'a': 1, 'b': 5})}\nand {format_tool_call('shout', {'text': 'é'})}"
    )
    calls = parse_tool_calls(text)
    assert [(c.name, c.arguments, c.ok) for c in calls] == [
        ("add", {"a": 1, "b": 5}, True),
        ("shout", {"text": "é"}, True),
    ]
    assert has_tool_call(text) and not has_tool_call("no calls") and parse_tool_calls("no calls") == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"name": "add", "arguments": {"a": 1,}}', "not valid JSON"),
        ('{"arguments": {"a": 1}}', 'no "name"'),
        ('["add"]', "must be a JSON object"),
        ('{"name": "add", "arguments": [1]}', '"arguments" must be a JSON object'),
        ('{"name": "add", "arguments": "{bad"}', "not a JSON object"),
        ("", "empty"),
    ],
)
def test_malformed_calls_become_readable_errors(body: str, expected: str) -> None:
    (call,) = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert not call.ok and expected in call.error
    assert '{"name": "<tool name>", "arguments"' in call.error  # tells the model the right shape


def test_parser_accepts_string_arguments_and_unclosed_final_call() -> None:
    (call,) = parse_tool_calls('<tool_call>{"name": "add", "arguments": "{\\"a\\": 4}"}')
    assert call.ok and call.arguments == {"a": 4} and not call.closed


def test_parser_never_raises_on_garbage() -> None:
    rng = random.Random(0)
    pieces = ["<tool_call>", "</tool_call>", "{", "}", '"name"', ":", '"add"', "arguments", "[", "é", "\n", "null"]
    for _ in range(500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        for call in parse_tool_calls(text):
            assert call.ok or isinstance(call.error, str)
        assert all(m["role"] == "tool" for m in execute_tool_calls(text, [add]))


def test_execute_returns_results_and_errors_as_tool_messages() -> None:
    text = "".join(
        [
            format_tool_call("add", {"a": 1, "b": 5}),
            format_tool_call("shout", {"text": "hi"}),
            format_tool_call("ad", {"a": 1}),
            format_tool_call("add", {"a": "one"}),
            format_tool_call("explode", {"reason": "boom"}),
            "<tool_call>{oops</tool_call>",
        ]
    )
    results = execute_tool_calls(text, [add, shout, explode])
    assert [m["role"] for m in results] == ["tool"] * 6
    assert results[0] == {"role": "tool", "content": "6", "name": "add"}
    assert json.loads(results[1]["content"]) == {"text": "HI"}
    assert "unknown tool 'ad'. Did you mean 'add'?" in results[2]["content"]
    assert "invalid arguments for tool 'add': a:" in results[3]["content"]
    assert results[4]["content"] == "Error: tool 'explode' raised RuntimeError: boom"
    assert results[5]["content"].startswith("Error: the tool call is not valid JSON")
    assert execute_tool_calls("plain answer", [add]) == []


def test_long_results_are_truncated_with_a_marker() -> None:
    (message,) = execute_tool_calls(format_tool_call("shout", {"text": "a" * 50}), [shout], max_chars=20)
    assert message["content"].endswith("more characters]") and "output truncated" in message["content"]


def test_tools_prompt_lists_schemas_and_the_call_format() -> None:
    schema = as_tool(add).schema
    prompt = tools_system_prompt([schema])
    assert json.dumps(schema) in prompt and "<tools>" in prompt and "<tool_call>" in prompt
    merged = with_tools_prompt(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], [schema]
    )
    assert merged[0]["content"].startswith("Be brief.\n\n# Tools") and len(merged) == 2
    inserted = with_tools_prompt([{"role": "user", "content": "hi"}], [schema])
    assert inserted[0] == {"role": "system", "content": prompt}
    assert with_tools_prompt([{"role": "user", "content": "hi"}], []) == [{"role": "user", "content": "hi"}]


def test_template_tool_support_is_detected(tiny_model_dir) -> None:  # noqa: ANN001 - pytest fixture
    tokenizer = load_tokenizer(tiny_model_dir)
    assert not template_supports_tools(tokenizer)  # the tiny ChatML template ignores tools=
    tokenizer.chat_template = (
        "{%- if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
        "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    )
    assert template_supports_tools(tokenizer)


async def fetch(key: str) -> str:
    """Look a key up asynchronously."""
    return key[::-1]


def test_async_tools_run_to_completion() -> None:
    (message,) = execute_tool_calls(format_tool_call("fetch", {"key": "abc"}), [fetch])
    assert message == {"role": "tool", "content": "cba", "name": "fetch"}


class Room:
    """A class of the env's own: no JSON schema describes it."""


def enter(room: Room, hurry: bool = False) -> str:
    """Enter a room.

    Args:
        room: The room.
        hurry: Whether to run.
    """
    return "in"


def look(direction: str) -> str:
    """Look around.

    Args:
        dir: Where to look (documented under an old name).
    """
    return direction


def test_a_parameter_typed_with_a_custom_class_is_one_line_naming_the_tool_and_parameter() -> None:
    with pytest.raises(ConfigError) as info:
        as_tool(enter)
    message = str(info.value)
    assert "tool 'enter' parameter 'room' is typed Room" in message and "pydantic BaseModel" in message
    assert "\n" not in message and "arbitrary_types_allowed" not in message


def test_docstring_args_naming_no_parameter_warn() -> None:
    from agentrl.tools import ToolDocWarning

    with pytest.warns(
        ToolDocWarning, match=r"tool 'look': its docstring's Args: documents 'dir', which is not a param"
    ):
        as_tool(look)
