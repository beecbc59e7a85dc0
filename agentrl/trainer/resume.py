"""The config a ``--resume`` continues with: the run directory keeps the resolved config it was started with.

``agentrl train --resume RUN_DIR`` alone continues with ``RUN_DIR/config.yaml``. A config file or
overrides given as well must resolve to the same config; a difference is a ConfigError naming each
changed key (values in the run and now), unless ``--accept-config-changes`` says it is meant, in which
case the run continues with (and saves) the new config.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from agentrl.errors import ConfigError
from agentrl.job.loader import apply_override, build_config, load_config, parse_yaml
from agentrl.job.run_config import RunConfig
from agentrl.util.disk import write_text_durably

RESOLVED_CONFIG = "config.yaml"
ACCEPT_FLAG = "--accept-config-changes"


def resume_command(run_dir: Path) -> str:
    """The command that continues ``run_dir`` (what a stopped job prints)."""
    return f"agentrl train --resume {run_dir}"


def save_resolved_config(run_dir: Path, cfg: RunConfig) -> None:
    """Write ``cfg`` (every default filled in) to ``run_dir/config.yaml``, what a bare ``--resume`` reads."""
    text = "# The resolved config of this run; `agentrl train --resume RUN_DIR` continues with it.\n"
    text += yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    write_text_durably(run_dir / RESOLVED_CONFIG, text)


def saved_config_data(run_dir: Path) -> dict[str, Any] | None:
    """The mapping in ``run_dir/config.yaml``, or None for a run started before runs kept their config."""
    path = run_dir / RESOLVED_CONFIG
    if not path.is_file():
        return None
    data = parse_yaml(path.read_text(encoding="utf-8"), source=str(path))
    return data if isinstance(data, dict) else None


def differences(saved: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, saved value, new value) for every leaf that differs between two config mappings."""
    if isinstance(saved, dict) and isinstance(new, dict):
        found = []
        for key in dict.fromkeys([*saved, *new]):
            found += differences(saved.get(key), new.get(key), f"{prefix}.{key}" if prefix else str(key))
        return found
    return [] if saved == new else [(prefix, saved, new)]


def resume_config(
    run_dir: Path, config: str | None, overrides: Sequence[str] = (), *, accept_changes: bool = False
) -> RunConfig:
    """The config to continue ``run_dir`` with (see the module docstring); ConfigError names every difference."""
    saved = saved_config_data(run_dir)
    if saved is None:
        if config is None:
            raise ConfigError(
                f"--resume {str(run_dir)!r}: the run directory has no {RESOLVED_CONFIG} (a run started by an older "
                "agentrl); pass the CONFIG file and overrides it was started with: agentrl train CONFIG [overrides] "
                f"--resume {run_dir}"
            )
        return load_config(config, overrides)
    source = f"the run's config {str(run_dir / RESOLVED_CONFIG)!r}"
    if config is None and not overrides:
        return build_config(saved, source=source)
    if config is not None:
        new = load_config(config, overrides)
    else:
        data = yaml.safe_load(yaml.safe_dump(saved))  # a deep copy the overrides may change
        problems = [p for p in (apply_override(data, o) for o in overrides) if p is not None]
        new = build_config(data, source=f"{source} with its command-line overrides", problems=problems)
    changed = differences(build_config(saved, source=source).model_dump(mode="json"), new.model_dump(mode="json"))
    if changed and not accept_changes:
        lines = [f"  {key}: {old!r} in the run, {now!r} now" for key, old, now in changed]
        raise ConfigError(
            "\n".join(
                [
                    f"--resume {run_dir}: the config given differs from the one the run was started with "
                    f"({RESOLVED_CONFIG}) in {len(changed)} key{'s' if len(changed) != 1 else ''}:",
                    *lines,
                    f"Run `agentrl train --resume {run_dir}` alone to continue it as started, or add {ACCEPT_FLAG} "
                    "to continue with these changes",
                ]
            )
        )
    return new
