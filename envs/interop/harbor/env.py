"""Harbor-v0: solve Harbor-format tasks with shell commands in a hardened Docker sandbox; tests/test.sh grades.

Each turn the model runs shell commands (```bash blocks or ``bash`` tool calls) in the task's
container and sees their output; a turn without a command (or ``submit``), or the last turn, ends
the episode and runs the verifier. In Harbor's shared mode the verifier runs in the agent's
container: agentrl copies ``tests/`` in only then, recreates ``/logs/verifier`` (a planted reward
file is gone), has killed every process the agent started (each command's background processes die
with it), and runs ``test.sh`` with a clean environment. What the tests themselves execute of the
agent's files can still write the reward file: that is inherent to the format (docs/interop.md).
In separate mode (``harbor init``'s default) ``test.sh`` runs in a second sandbox on the verifier's
image, which receives only the task's ``artifacts`` and ``/logs/artifacts`` from the agent's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrl.env import Message, MultiTurnEnv, StepResult, system, tool, user
from agentrl.tools.toolcall import parse_tool_calls
from envs.interop.harbor.image import ensure_image, ensure_verifier_image, image_workdir, workdir_files
from envs.interop.harbor.separate import collect_artifacts, writable_roots
from envs.interop.harbor.task_config import HarborFieldError
from envs.interop.harbor.tasks import BUNDLED, HarborTask, load_harbor_tasks

_BASH = re.compile(r"```(?:bash|sh|shell)\n(.*?)```", re.DOTALL)
_CLEAN_ENV = ["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "PYTHONNOUSERSITE=1"]
MiB = 1024 * 1024


def bash(command: str) -> str:
    """Run a shell command in the task's container (working directory: the task's WORKDIR).

    Args:
        command: The command line, run with bash.
    """
    raise NotImplementedError("executed by HarborEnv in its sandbox")  # the schema is what matters


def submit() -> str:
    """Finish: the task's tests run and grade the container's state."""
    raise NotImplementedError("executed by HarborEnv in its sandbox")


class HarborConfig(BaseModel):
    """Constructor kwargs of Harbor-v0."""

    model_config = ConfigDict(extra="forbid")
    tasks: str = Field(str(BUNDLED), description="A Harbor task directory, or a folder of them (default: bundled).")
    max_turns: int = Field(6, ge=1, description="Assistant turns; the verifier runs after the last one.")
    command_timeout_s: float = Field(20.0, gt=0, description="Wall-clock limit of one command.")
    max_output_chars: int = Field(2000, ge=100, description="Command output shown to the model (head kept).")
    memory_bytes: int = Field(512 * MiB, ge=64 * MiB, description="Container memory (task.toml memory_mb wins).")
    docker_host: str | None = Field(None, description="Docker engine URL (None: $DOCKER_HOST or the local socket).")


def _format(result: Any, max_chars: int) -> str:
    text = "".join(part for part in (result.stdout, result.stderr) if part)
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n[... {len(text) - max_chars} more characters cut]"
    status = "timed out" if result.timed_out else f"exit code {result.exit_code}"
    return f"[{status}]\n{text}" if text else f"[{status}]"


REWARD_FILES = ("reward.json", "reward.txt", "rewards.json")


def parse_reward(files: dict[str, bytes]) -> tuple[float, dict[str, float]]:
    """Harbor's order: reward.json (its 'reward' key, else the mean of its values), else reward.txt.

    ``rewards.json`` (the name Harbor's own template comment uses) is read last, like reward.json.
    """
    if "reward.txt" in files and "reward.json" not in files:
        return float(files["reward.txt"].decode().strip() or 0.0), {}
    data = json.loads(files.get("reward.json", files.get("rewards.json", b"")))
    if not isinstance(data, dict):
        data = {"reward": data}
    components = {str(k): float(v) for k, v in data.items()}
    total = components.get("reward", sum(components.values()) / max(1, len(components)))
    return total, components


class HarborEnv(MultiTurnEnv):
    """Harbor/Terminal-Bench-format tasks: shell commands in the task's container, graded by tests/test.sh."""

    config_model = HarborConfig
    tools = (bash, submit)

    def __init__(self, **kwargs: Any) -> None:
        self.config = HarborConfig(**kwargs)
        self.max_turns = self.config.max_turns
        self._tasks = {task.task_id: task for task in load_harbor_tasks(self.config.tasks)}
        self.task: HarborTask = next(iter(self._tasks.values()))
        self.turn = 0
        self._client: Any = None
        self._sandbox: Any = None
        self._image: str | None = None
        self._verifier_box: Any = None  # separate mode: the verifier's own sandbox, reused per image
        self._verifier_image: str | None = None

    def task_ids(self) -> list[str]:
        """Task directory names, sorted."""
        return list(self._tasks)

    def _docker(self) -> Any:
        if self._client is None:
            import docker

            url = self.config.docker_host
            self._client = docker.DockerClient(base_url=url) if url else docker.from_env()
        return self._client

    def _open(self, task: HarborTask) -> None:
        """A sandbox on the task's image (reused, reset, when the image is the same), its work dir seeded."""
        image = ensure_image(self._docker(), task)
        if self._sandbox is not None and image == self._image:
            self._sandbox.reset()
        else:
            self._close_box()
            self._sandbox, self._image = self._box(task, image, {"/tests": 16 * MiB, "/logs": 16 * MiB}), image
        self._seed(self._sandbox, image)

    def _box(self, task: HarborTask, image: str, tmpfs: dict[str, int]) -> Any:
        """A hardened sandbox on ``image`` with the task's limits (``[environment]``)."""
        from sandboxes import DockerSandboxConfig, make_sandbox

        memory = task.memory_mb * MiB if task.memory_mb else self.config.memory_bytes
        config = DockerSandboxConfig(
            image=image,
            workdir=task.workdir or image_workdir(self._docker(), image),
            workdir_size_bytes=task.storage_mb * MiB if task.storage_mb else 64 * MiB,
            memory_bytes=memory,
            cpus=min(float(task.cpus or 1.0), 2.0),
            env=dict(task.env),
            extra_tmpfs=tmpfs,
            docker_host=self.config.docker_host,
        )
        return make_sandbox(config)

    def _seed(self, box: Any, image: str) -> None:
        """Write the files the image holds in its work dir (the sandbox mounts a fresh tmpfs over it)."""
        seed_files = workdir_files(self._docker(), image, box.config.workdir)
        if seed_files:
            box.write_files(seed_files)

    def preflight(self) -> list[str]:
        """Make every task's image (offline) and start the first task's sandbox."""
        images = {task_id: ensure_image(self._docker(), task) for task_id, task in self._tasks.items()}
        for task in self._tasks.values():
            if task.verifier_mode == "separate":
                images[f"{task.task_id} (verifier)"] = ensure_verifier_image(self._docker(), task)
        self._open(self.task)
        return [f"Harbor: {len(images)} task(s) from {self.config.tasks}, images {sorted(set(images.values()))}"]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start task ``options['task_id']`` (else one drawn with ``seed``) in a fresh container state."""
        super().reset(seed=seed)
        task_id = self.choose_task_id(options, self._tasks, f"the Harbor tasks of {self.config.tasks}")
        self.task, self.turn = self._tasks[task_id], 0
        self._open(self.task)
        workdir = self._sandbox.config.workdir
        prompt = (
            f"You work in a Linux container; the working directory is {workdir}. Run shell commands in ```bash code "
            "blocks (or call the bash tool) and you will see their output. When the task is done, reply without a "
            f"command (or call submit): the task's tests then grade the container. You have {self.max_turns} turns."
        )
        return [system(prompt), user(self.task.instruction)], {"task_id": task_id}

    def _commands(self, action: str) -> tuple[list[tuple[str, bool]], bool]:
        """(command, via_tool) pairs in the turn, and whether the turn asked to submit."""
        commands = [(block.strip(), False) for block in _BASH.findall(action) if block.strip()]
        submitted = False
        for call in parse_tool_calls(action):
            if call.ok and call.name == "bash" and isinstance(call.arguments.get("command"), str):
                commands.append((call.arguments["command"], True))
            submitted = submitted or call.name == "submit"
        return commands, submitted

    def step(self, action: str) -> StepResult:
        """Run the turn's commands; a turn without one, a submit, or the last turn runs the verifier."""
        self.turn += 1
        commands, submitted = self._commands(action)
        messages: list[Message] = []
        for command, via_tool in commands:
            result = self._sandbox.exec(["bash", "-c", command], timeout_s=self.config.command_timeout_s)
            text = _format(result, self.config.max_output_chars)
            messages.append(tool(text, name="bash") if via_tool else user(f"Output:\n{text}"))
        if commands and not submitted and self.turn < self.max_turns:
            return messages, 0.0, False, False, {"commands": len(commands)}
        reward, info = self._verify()
        return messages, reward, True, False, info

    def _verify(self) -> tuple[float, dict[str, Any]]:
        if self.task.verifier_mode == "shared":
            return self._run_tests(self._sandbox, upload_tests=True)
        artifacts = collect_artifacts(self._sandbox, self.task.artifacts)
        image = ensure_verifier_image(self._docker(), self.task)
        if self._verifier_box is not None and image == self._verifier_image:
            self._verifier_box.reset()
        else:
            self._close_verifier()
            tmpfs = {"/logs": 16 * MiB} if self.task.tests_bundled else {"/tests": 16 * MiB, "/logs": 16 * MiB}
            self._verifier_box, self._verifier_image = self._box(self.task, image, tmpfs), image
        box = self._verifier_box
        outside = [p for p in artifacts if not p.startswith(writable_roots(box.config.workdir))]
        if outside:
            raise HarborFieldError(
                f"Harbor task {self.task.task_id!r}: artifact path(s) {', '.join(sorted(outside)[:3])} lie outside "
                f"the separate verifier's writable dirs ({', '.join(writable_roots(box.config.workdir))}); the "
                "sandbox's root file system is read-only: declare artifacts under the work dir or /logs/artifacts"
            )
        self._seed(box, image)
        box.exec(["bash", "-c", "rm -rf /logs/artifacts /logs/verifier; mkdir -p /logs/verifier"], timeout_s=30)
        if artifacts:
            box.write_files(artifacts)
        reward, info = self._run_tests(box, upload_tests=not self.task.tests_bundled)
        info.update(verifier_mode="separate", artifacts=len(artifacts))
        return reward, info

    def _run_tests(self, box: Any, *, upload_tests: bool) -> tuple[float, dict[str, Any]]:
        """Run /tests/test.sh in ``box`` with a clean environment and read the reward it wrote."""
        wipe = "rm -rf /logs/verifier /tests/* /tests/.[!.]*" if upload_tests else "rm -rf /logs/verifier"
        box.exec(["bash", "-c", f"{wipe}; mkdir -p /logs/verifier"], timeout_s=30)
        if upload_tests:
            tests = {
                f"/tests/{path.relative_to(self.task.tests_dir)}": path.read_bytes()
                for path in sorted(self.task.tests_dir.rglob("*"))
                if path.is_file()
            }
            box.write_files(tests)
        variables = [f"{key}={value}" for key, value in self.task.verifier_env.items()]
        result = box.exec([*_CLEAN_ENV, *variables, "bash", "/tests/test.sh"], timeout_s=self.task.verifier_timeout_s)
        files = {}
        for name in REWARD_FILES:
            probe = box.exec(["test", "-f", f"/logs/verifier/{name}"], timeout_s=10)
            if probe.exit_code == 0:
                files[name] = box.read_file(f"/logs/verifier/{name}")
        info: dict[str, Any] = {"verifier_exit_code": result.exit_code, "verifier_timed_out": result.timed_out}
        if not files:
            output = (result.stdout + result.stderr)[-800:]
            info.update(success=False, verifier_error=f"tests/test.sh wrote no reward file; its output ends: {output}")
            return 0.0, info
        try:
            reward, components = parse_reward(files)
        except (ValueError, KeyError) as exc:
            info.update(success=False, verifier_error=f"unreadable reward file: {exc}")
            return 0.0, info
        info.update(success=reward >= 1.0, reward_components=components or {"tests": reward})
        return reward, info

    def _close_box(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = self._image = None

    def _close_verifier(self) -> None:
        if self._verifier_box is not None:
            self._verifier_box.close()
            self._verifier_box = self._verifier_image = None

    def close(self) -> None:
        """Remove the task's container (and the separate verifier's)."""
        self._close_box()
        self._close_verifier()


def bundled_tasks_dir() -> Path:
    """The bundled Harbor tasks (envs/data/harbor)."""
    return BUNDLED
