"""Make a Harbor task's container image on the local Docker engine, offline, and read its work dir.

``docker_image`` must already be on the engine (nothing is pulled); an ``environment/Dockerfile``
is built with networking off, after checking that every ``FROM`` image is present. Either way a
missing piece raises ``HarborImageError`` naming it and the fix. Because the sandbox mounts a fresh
tmpfs over the work dir, the files the image holds there are read once (``workdir_files``) and
written into each episode's sandbox.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentrl.errors import PreflightError
from envs.interop.harbor.tasks import HarborTask

_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE | re.MULTILINE)


class HarborImageError(PreflightError):
    """A Harbor task's environment image is missing and cannot be made offline."""


def base_images(dockerfile: Path) -> list[str]:
    """External images a Dockerfile builds FROM (stage names excluded)."""
    stages: set[str] = set()
    bases = []
    for image, stage in _FROM.findall(dockerfile.read_text(encoding="utf-8")):
        if image.lower() not in stages and image.lower() != "scratch":
            bases.append(image)
        if stage:
            stages.add(stage.lower())
    return bases


def _present(client: Any, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def _context_hash(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _prebuilt(client: Any, task: HarborTask, image: str, field: str) -> str:
    if not _present(client, image):
        raise HarborImageError(
            f"Harbor task {task.task_id!r}: {field} {image!r} is not on this Docker engine and cannot be pulled "
            "offline: `docker load` or build it on this machine, or give the task a Dockerfile FROM an image the "
            "engine has (e.g. agentrl-python:1)"
        )
    return image


def _build(client: Any, task: HarborTask, dockerfile: Path, suffix: str) -> str:
    """Build ``dockerfile`` (its folder is the context) offline, tagged by the context's content."""
    import docker

    where = dockerfile.relative_to(task.path) if dockerfile.is_relative_to(task.path) else dockerfile
    missing = [image for image in base_images(dockerfile) if not _present(client, image)]
    if missing:
        raise HarborImageError(
            f"Harbor task {task.task_id!r}: {where} builds FROM {', '.join(missing)}, not on this Docker engine, "
            "and images cannot be pulled offline: `docker load` it, or change FROM to an image the engine has "
            "(e.g. agentrl-python:1, built by scripts/docker_setup.sh; docs/interop.md shows how)"
        )
    context = dockerfile.parent
    name = re.sub(r"[^a-z0-9_.-]", "-", task.task_id.lower()) + suffix
    tag = f"agentrl-harbor/{name}:{_context_hash(context)}"
    if _present(client, tag):
        return tag
    try:
        client.images.build(path=str(context), tag=tag, network_mode="none", rm=True, forcerm=True)
    except docker.errors.BuildError as exc:
        log = "".join(str(line.get("stream", line.get("error", ""))) for line in exc.build_log)[-1500:]
        raise HarborImageError(
            f"building Harbor task {task.task_id!r} ({where}) failed offline: {exc}. A step that needs "
            f"the network (apt-get, pip) cannot run here; bake it into the base image. Build log tail:\n{log}"
        ) from exc
    return tag


def ensure_image(client: Any, task: HarborTask) -> str:
    """The image tag to run ``task`` in: its prebuilt image, or its Dockerfile built offline (cached by content)."""
    if task.docker_image is not None:
        return _prebuilt(client, task, task.docker_image, "[environment] docker_image")
    assert task.dockerfile is not None  # load_task guarantees one of the two
    return _build(client, task, task.dockerfile, "")


def ensure_verifier_image(client: Any, task: HarborTask) -> str:
    """The separate verifier's image: [verifier.environment] docker_image, tests/Dockerfile, else the task's own."""
    if task.verifier_docker_image is not None:
        return _prebuilt(client, task, task.verifier_docker_image, "[verifier.environment] docker_image")
    if task.verifier_dockerfile is not None:
        return _build(client, task, task.verifier_dockerfile, "-verifier")
    return ensure_image(client, task)


def image_workdir(client: Any, image: str) -> str:
    """The image's WORKDIR (Harbor tasks work in it), /app when the image sets none."""
    return str(client.images.get(image).attrs.get("Config", {}).get("WorkingDir") or "/app")


@lru_cache(maxsize=32)
def _archive(client: Any, image: str, workdir: str) -> dict[str, bytes]:
    container = client.containers.create(image, ["true"], network_disabled=True)
    try:
        stream, _ = container.get_archive(workdir)
        raw = b"".join(stream)
    finally:
        container.remove(force=True)
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                name = member.name.split("/", 1)[1] if "/" in member.name else ""
                handle = tar.extractfile(member)
                if name and handle is not None:
                    files[name] = handle.read()
    return files


def workdir_files(client: Any, image: str, workdir: str) -> dict[str, bytes]:
    """The files ``image`` holds under ``workdir`` (relative paths), read once per image."""
    return dict(_archive(client, image, workdir))
