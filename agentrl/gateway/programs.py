"""Agent programs behind the gateway: a Python function in this process, or a command run per episode.

Both run one task against one conversation's endpoint and return an ``AgentOutcome``. The reward crosses
as plain data with exact types (a finite number, a bool, or a ``{"reward", "reward_components",
"success"}`` object), never as an object with its own comparison. A command runs without a shell in its own
process group, which is killed (TERM, then KILL) when its episode ends early; on Linux it also dies with the
job (``PR_SET_PDEATHSIG``), so a SIGKILLed trainer leaves no agent behind.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import inspect
import json
import math
import numbers
import os
import shutil
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentrl.errors import AgentGatewayError, ConfigError
from agentrl.gateway.session import AgentOutcome

INSTALL_HINT = "pip install 'agentrl[gateway]'"
STDOUT_TAIL_BYTES = 64 * 1024  # the reward line is the last line; older output is dropped as it streams
STDERR_TAIL_BYTES = 8 * 1024
KILL_GRACE_S = 2.0
# Runs before the agent's own program: die with the job (PR_SET_PDEATHSIG = 1), unless the job already died.
_GUARD = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "os.getppid() == int(sys.argv[1]) or os._exit(70)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


@dataclass(frozen=True)
class Endpoint:
    """Where one conversation's agent talks: its OpenAI base URL and bearer key."""

    base_url: str
    api_key: str


class AgentProgram(Protocol):
    """A runnable agent: one task against one endpoint, to an outcome."""

    async def run(self, task: dict[str, Any], endpoint: Endpoint) -> AgentOutcome:
        """Run the agent on ``task``; raise for a failure (it is recorded on the episode)."""
        ...

    def preflight(self) -> list[str]:
        """Check what the agent needs without running it; one line per check."""
        ...


def _number(value: Any, what: str) -> float:
    if not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise AgentGatewayError(f"{what} is {value!r} (a {type(value).__name__}); return a finite number")
    return float(value)


def outcome_of(value: Any, source: str) -> AgentOutcome:
    """An agent's return value (or parsed reward line) as an outcome; AgentGatewayError says what is wrong."""
    if not isinstance(value, dict):
        return AgentOutcome(reward=_number(value, f"the reward of {source}"))
    unknown = set(value) - {"reward", "reward_components", "success"}
    if "reward" not in value or unknown:
        raise AgentGatewayError(
            f"{source} returned {str(value)[:120]}; return a number or an object with 'reward' and optionally "
            f"'reward_components' and 'success' (unexpected keys: {sorted(unknown)})"
        )
    components = value.get("reward_components") or {}
    if not isinstance(components, dict):
        raise AgentGatewayError(f"reward_components of {source} must be an object of numbers, got {components!r}")
    success = value.get("success")
    if success is not None and not isinstance(success, bool):
        raise AgentGatewayError(f"success of {source} must be true or false, got {success!r}")
    return AgentOutcome(
        reward=_number(value["reward"], f"the reward of {source}"),
        reward_components={str(k): _number(v, f"reward_components[{k!r}] of {source}") for k, v in components.items()},
        success=success,
    )


def _openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ConfigError(f"a python agent needs the openai client: {INSTALL_HINT} ({exc})") from exc
    return openai


def _import_entry(entry: str) -> Callable[..., Any]:
    module_name, _, attr = entry.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"cannot import the agent module {module_name!r} ({exc}); run where {module_name}.py is, or add its "
            "directory to PYTHONPATH"
        ) from exc
    for part in attr.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise ConfigError(f"agent {entry!r}: {module_name} has no function {attr!r}; point entry at the agent function")
    try:
        inspect.signature(target).bind(None, None)
    except TypeError as exc:
        raise ConfigError(f"agent {entry!r} must accept (client, task): {exc}") from exc
    return target


class PythonAgent:
    """``agent(client, task) -> reward``, with an openai client on the episode's endpoint."""

    def __init__(self, entry: str, request_timeout_s: float) -> None:
        self.entry, self.request_timeout_s = entry, request_timeout_s
        self.fn = _import_entry(entry)

    def preflight(self) -> list[str]:
        """The openai client is installed and the agent function imports."""
        openai = _openai()
        kind = "async def" if inspect.iscoroutinefunction(self.fn) else "def (run in a thread)"
        return [f"agent {self.entry}: {kind}, openai {openai.__version__}"]

    async def run(self, task: dict[str, Any], endpoint: Endpoint) -> AgentOutcome:
        """Call the agent with its own copy of the task (a mutation cannot reach another episode)."""
        openai, task = _openai(), copy.deepcopy(task)
        options = {"base_url": endpoint.base_url, "api_key": endpoint.api_key, "timeout": self.request_timeout_s}
        if inspect.iscoroutinefunction(self.fn):
            async with openai.AsyncOpenAI(**options) as client:
                value = await self.fn(client, task)
        else:
            with openai.OpenAI(**options) as client:
                value = await asyncio.to_thread(self.fn, client, task)
        return outcome_of(value, f"agent {self.entry}")


class CommandAgent:
    """A program per episode: task on stdin (or as its last argument), reward as the last line of stdout."""

    def __init__(
        self, command: list[str], task_input: Literal["stdin", "argv"], cwd: str | None, env: dict[str, str]
    ) -> None:
        self.command, self.task_input, self.cwd, self.env = list(command), task_input, cwd, dict(env)

    def preflight(self) -> list[str]:
        """The program exists."""
        program = self.command[0]
        found = shutil.which(program, path=os.environ.get("PATH")) or (os.access(program, os.X_OK) and program)
        if not found:
            raise ConfigError(f"agent command {program!r} is not an executable on PATH; give its full path")
        return [f"agent command {' '.join(self.command)} ({found})"]

    async def run(self, task: dict[str, Any], endpoint: Endpoint) -> AgentOutcome:
        """Run the program to its end; its process group is killed if this is cancelled."""
        payload = json.dumps(task, ensure_ascii=False)
        by_argv = self.task_input == "argv"
        argv = [*self.command, *([payload] if by_argv else [])]
        env = {**os.environ, **self.env, "OPENAI_BASE_URL": endpoint.base_url}
        env |= {"OPENAI_API_KEY": endpoint.api_key, "AGENTRL_TASK_ID": str(task["task_id"])}
        if sys.platform.startswith("linux"):
            argv = [sys.executable, "-S", "-c", _GUARD, str(os.getpid()), *argv]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.cwd,
            env=env,
            start_new_session=True,
        )
        try:
            out, err, _ = await asyncio.gather(
                _tail(proc.stdout, STDOUT_TAIL_BYTES),
                _tail(proc.stderr, STDERR_TAIL_BYTES),
                _feed(proc, None if by_argv else payload),
            )
            code = await proc.wait()
        except BaseException:
            await _kill(proc)
            raise
        return self._outcome(code, out.decode(errors="replace"), err.decode(errors="replace"))

    def _outcome(self, code: int, out: str, err: str) -> AgentOutcome:
        name = " ".join(self.command)
        if code != 0:
            raise AgentGatewayError(f"agent command {name!r} exited with code {code}; its stderr ends:\n{err[-2000:]}")
        lines = [line.strip() for line in out.splitlines() if line.strip()]
        try:
            value = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise AgentGatewayError(
                f"agent command {name!r} did not print its reward as the last line of stdout (last line: "
                f'{(lines or [""])[-1][:120]!r}); print one JSON line such as {{"reward": 1.0}} last, logs to stderr'
            )
        return outcome_of(value, f"agent command {name!r}").model_copy(update={"reward_line": lines[-1]})


async def _tail(stream: asyncio.StreamReader | None, limit: int) -> bytes:
    data = bytearray()
    while stream is not None and (chunk := await stream.read(65536)):
        data += chunk
        del data[:-limit]
    return bytes(data)


async def _feed(proc: asyncio.subprocess.Process, payload: str | None) -> None:
    """Write the task line (None: nothing) and close stdin."""
    if proc.stdin is None:
        return
    try:
        if payload is not None:
            proc.stdin.write((payload + "\n").encode())
            await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):  # the program does not read stdin: fine
        pass
    finally:
        proc.stdin.close()


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """TERM the program's process group, KILL it after a grace period."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 10.0)):
        if proc.returncode is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except asyncio.TimeoutError:
            continue
