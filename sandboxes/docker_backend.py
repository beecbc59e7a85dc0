"""DockerSandbox: one hardened container per sandbox, kept running, with a Python session inside.

The session server is passed as `python3 -c SOURCE` to a `docker exec` whose stdin/stdout socket
carries the frames, so a cell costs a round trip, not a container start. Nothing of the host is
mounted unless the config names it; the container has no network, no capabilities, a read-only root.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
import weakref
from typing import Any

import docker
import docker.errors
import docker.utils
import requests

from sandboxes.base import Sandbox
from sandboxes.channel import FrameChannel, max_frame_bytes
from sandboxes.config import DockerSandboxConfig
from sandboxes.errors import ImageNotFoundError, SandboxStartError, SandboxUnavailableError
from sandboxes.reaper import LABEL, OWNER_LABEL, owner_tag, reap_stale_once
from sandboxes.session import server_source

SERVER_SOURCE = server_source()
# A container's exit reaches the engine's state a moment after its processes die (and the session with them).
_STOP_REPORT_S = 1.0
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


def docker_url(config: DockerSandboxConfig) -> str:
    """The engine URL: explicit config, else $DOCKER_HOST, else the default socket (never the CLI context)."""
    return config.docker_host or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


# One client per engine URL and process, shared by every sandbox. A client per sandbox held a connection pool
# of its own (about eight descriptors), freed only by the cyclic garbage collector after the sandbox closed: a
# trainer with a hundred pooled sandboxes passed 1024 descriptors, where select() failed every sandbox start and
# grading, and would pass a soft limit of 1024 open files outright. Keyed by pid: a forked child connects anew.
_clients: dict[tuple[int, str, float], docker.DockerClient] = {}
_clients_lock = threading.Lock()


def connect(config: DockerSandboxConfig) -> docker.DockerClient:
    """The process's client for the configured engine (it answered a ping when made), or SandboxUnavailableError
    saying how to get an engine."""
    url, timeout = docker_url(config), max(config.start_timeout_s, 10.0)
    key = (os.getpid(), url, timeout)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _new_client(config, url, timeout)
    return client


def _new_client(config: DockerSandboxConfig, url: str, timeout: float) -> docker.DockerClient:
    try:
        if config.docker_host:
            client = docker.DockerClient(base_url=config.docker_host, timeout=timeout)
        else:  # $DOCKER_HOST and its TLS variables, never the CLI's active context (docker-py 7.2's from_env uses it)
            client = docker.DockerClient(timeout=timeout, **docker.utils.kwargs_from_env())
        client.ping()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise SandboxUnavailableError(
            f"no Docker engine reachable at {url} ({exc}): start one (bash scripts/docker_setup.sh, as root), "
            "point DOCKER_HOST or DockerSandboxConfig.docker_host at it, or use ProcessSandboxConfig"
        ) from exc
    return client


def check_image(client: docker.DockerClient, image: str) -> None:
    """Fail early, with the build command, when the image is missing."""
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound as exc:
        raise ImageNotFoundError(
            f"sandbox image {image!r} is not on the Docker engine: build it offline with "
            f"`bash scripts/build_sandbox_image.sh {image}` (or `docker build -t {image} sandboxes/images/python`)"
        ) from exc


def _force_remove(client: docker.DockerClient, container_id: str) -> None:
    try:
        client.api.remove_container(container_id, force=True)
    except (docker.errors.DockerException, requests.RequestException):
        pass  # already gone, or the engine is: the next process to start a sandbox there reaps labelled leftovers


def docker_available(config: DockerSandboxConfig | None = None) -> bool:
    """Whether a Docker engine answers and has the configured image (to choose a backend at start-up)."""
    config = config or DockerSandboxConfig()
    try:
        check_image(connect(config), config.image)
    except (SandboxUnavailableError, ImageNotFoundError):
        return False
    return True


class DockerSandbox(Sandbox):
    """A sandbox backed by one long-running, hardened Docker container."""

    _counter = 0
    _counter_lock = threading.Lock()

    def __init__(
        self,
        config: DockerSandboxConfig | None = None,
        *,
        client: docker.DockerClient | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.config = config or DockerSandboxConfig()
        self._container: Any = None
        self._socket: Any = None
        self._raw: Any = None  # the exec's HTTP response stream, which owns the socket's descriptor too
        self._labels = dict(labels or {})
        self._finalizer: weakref.finalize | None = None
        try:
            self._client = client or connect(self.config)
            check_image(self._client, self.config.image)
            # A killed process leaves its containers running: the next process to start a sandbox removes them.
            reap_stale_once(self._client, docker_url(self.config))
            self._track(self._create_container(self._labels))
            self._start_session()
        except BaseException:
            self.close()
            raise

    @property
    def container_id(self) -> str | None:
        """The Docker id of this sandbox's container (None after close)."""
        return self._container.id if self._container is not None else None

    def _track(self, container: Any) -> None:
        """Adopt a container; it is removed at interpreter exit if close() is never called."""
        if self._finalizer is not None:
            self._finalizer.detach()
        self._container = container
        self._finalizer = weakref.finalize(self, _force_remove, self._client, container.id)

    def _create_container(self, labels: dict[str, str]) -> Any:
        cfg = self.config
        with DockerSandbox._counter_lock:
            DockerSandbox._counter += 1
            name = f"agentrl-sbx-{os.getpid()}-{DockerSandbox._counter}-{uuid.uuid4().hex[:6]}"
        uid, _, gid = cfg.user.partition(":")
        owner = f"uid={uid},gid={gid or uid}"  # a tmpfs is root-owned unless told otherwise
        exec_flag = "exec" if cfg.workdir_exec else "noexec"
        inodes = f"nr_inodes={cfg.max_inodes}"  # every writable mount is bounded in bytes and in entries
        tmpfs = {
            cfg.workdir: f"rw,{exec_flag},nosuid,nodev,size={cfg.workdir_size_bytes},{inodes},mode=0700,{owner}",
            "/tmp": f"rw,noexec,nosuid,nodev,size={cfg.tmp_size_bytes},{inodes},mode=1777",
            "/dev/shm": f"rw,noexec,nosuid,nodev,size={cfg.tmp_size_bytes},{inodes},mode=1777",
            **{
                path: f"rw,{exec_flag},nosuid,nodev,size={size},{inodes},mode=0700,{owner}"
                for path, size in cfg.extra_tmpfs.items()
            },
        }
        try:
            return self._client.containers.run(
                cfg.image,
                ["sleep", "infinity"],
                detach=True,
                name=name,
                user=cfg.user,
                network_mode=cfg.network_mode,
                read_only=True,
                tmpfs=tmpfs,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=cfg.max_processes,
                mem_limit=cfg.memory_bytes,
                memswap_limit=cfg.memory_bytes,
                nano_cpus=int(cfg.cpus * 1e9),
                environment=dict(cfg.env),
                labels={LABEL: "1", OWNER_LABEL: owner_tag(), **cfg.labels, **labels},
                volumes={host: {"bind": inner, "mode": "ro"} for host, inner in cfg.volumes.items()},
            )
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise SandboxStartError(f"could not start a sandbox container from {cfg.image!r}: {exc}") from exc

    def _start_session(self) -> None:
        cfg = self.config
        server_cfg = {
            "workdir": cfg.workdir,
            "max_output_bytes": cfg.max_output_bytes,
            "max_read_bytes": cfg.max_read_bytes,
            "wipe_dirs": [cfg.workdir, "/tmp", *cfg.extra_tmpfs],
            "private_fs": True,  # everything writable in the container is the sandbox's: reset sweeps it all
            "own_pid_namespace": True,  # every process it can see is the sandbox's: a reset fails if one survives
            "kill_background": cfg.kill_background,
            "rlimits": {},
        }
        env = {"HOME": cfg.workdir, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8", **cfg.env}
        api = self._client.api
        try:
            exec_id = api.exec_create(
                self._container.id,
                [cfg.python, "-I", "-c", SERVER_SOURCE, json.dumps(server_cfg)],
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                user=cfg.user,
                workdir=cfg.workdir,
                environment=env,
            )["Id"]
            raw = api.exec_start(exec_id, socket=True)
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise SandboxStartError(f"could not start the Python session in {self._container.name}: {exc}") from exc
        self._raw, self._socket = raw, getattr(raw, "_sock", raw)
        fd = self._socket.fileno()
        limit = max_frame_bytes(cfg.max_output_bytes, cfg.max_read_bytes)
        self._channel = FrameChannel(fd, fd, docker_mux=True, max_frame_bytes=limit, keepalive=(raw, self._socket))
        try:
            self._channel.call({"op": "ping"}, cfg.start_timeout_s)
        except Exception as exc:
            raise SandboxStartError(
                f"the Python session in {self._container.name} did not start ({exc}); is {cfg.python!r} in "
                f"image {cfg.image!r}? server stderr: {self._channel.stderr_tail()!r}"
            ) from exc

    def _close_socket(self) -> None:
        # The socket's descriptor closes only once the HTTP response's file object on it (``raw``) is closed too:
        # socket.close() waits for every makefile() reference, and the response sits in a reference cycle.
        for stream in (self._raw, self._socket):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._raw = self._socket = None
        self._channel = None

    def _stopped_from_outside(self) -> str | None:
        """The container stopped without the kernel's OOM killer, or vanished: the code inside cannot do either
        (PID 1 is ``sleep``, which has no signal handlers, so the kernel drops every signal sent to it from inside
        its PID namespace), so the engine or a person did."""
        deadline = time.monotonic() + _STOP_REPORT_S
        while True:
            try:
                self._container.reload()
            except docker.errors.NotFound:
                return f"container {self._container.name} was removed from outside"
            except (docker.errors.DockerException, requests.RequestException) as exc:
                return f"the Docker engine did not answer about container {self._container.name}: {exc}"
            state = self._container.attrs.get("State", {})
            if not state.get("Running", True):
                break
            if time.monotonic() >= deadline:
                return None  # still running: the session ended inside it
            time.sleep(0.05)
        if state.get("OOMKilled", False):
            return None  # the code inside can exhaust the memory limit
        return f"container {self._container.name} was stopped from outside (exit code {state.get('ExitCode')})"

    def _restart(self) -> None:
        """Restart the container: tmpfs and every process are gone, so no orphan of the old session survives."""
        self._close_socket()
        try:
            self._container.restart(timeout=0)
        except docker.errors.NotFound:  # removed behind our back: start a fresh one
            self._track(self._create_container(self._labels))
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise SandboxStartError(f"could not restart sandbox container {self._container.name}: {exc}") from exc
        self._start_session()

    def close(self) -> None:
        """Remove the container (force); idempotent."""
        self._closed = True
        self._close_socket()
        self._container = None
        if self._finalizer is not None:
            self._finalizer()  # runs _force_remove once

    def __repr__(self) -> str:
        name = self._container.name if self._container is not None else "closed"
        return f"DockerSandbox({name}, image={self.config.image!r})"
