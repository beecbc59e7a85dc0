"""make_engine builds the backend the engine config names; ``agentrl serve`` is registered in the CLI."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentrl.config.sections import ModelConfig
from agentrl.engines import EmbeddedEngine, SGLangEngine, make_engine
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.errors import ConfigError, EngineConfigError, ModelLoadError


def test_make_engine_builds_each_backend(tiny_model_dir: Path) -> None:
    model_cfg = ModelConfig(path=str(tiny_model_dir), device="cpu", dtype="auto")
    engine = make_engine(EmbeddedEngineConfig(), model_cfg)
    try:
        assert isinstance(engine, EmbeddedEngine) and engine.weight_version == 0
        assert next(engine.runner.model.parameters()).dtype.is_floating_point
    finally:
        asyncio.run(engine.close())
    remote = make_engine(SGLangEngineConfig(urls=["http://127.0.0.1:30000/"]), model_cfg)
    assert isinstance(remote, SGLangEngine) and remote.urls == ["http://127.0.0.1:30000"]


def test_bad_engine_configs_are_clear(tmp_path: Path) -> None:
    with pytest.raises(EngineConfigError, match="engine.urls"):
        make_engine(SGLangEngineConfig(), ModelConfig(path=str(tmp_path)))
    with pytest.raises(ModelLoadError, match="config.json"):
        make_engine(EmbeddedEngineConfig(), ModelConfig(path=str(tmp_path), device="cpu"))


def test_an_unknown_kind_is_an_error_never_the_embedded_engine(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"engine.kind: unknown engine kind 'sglan' -> Did you mean 'sglang'\?"):
        make_engine({"kind": "sglan", "urls": ["http://127.0.0.1:1"]}, ModelConfig(path=str(tmp_path)))
    with pytest.raises(ConfigError, match="Registered kinds: embedded, sglang, vllm"):
        make_engine({"kind": "tgi"}, ModelConfig(path=str(tmp_path)))
    with pytest.raises(ConfigError, match="needs an engine config"):
        make_engine("embedded", ModelConfig(path=str(tmp_path)))  # type: ignore[arg-type]
    remote = make_engine({"kind": "sglang", "urls": ["http://127.0.0.1:1"]}, ModelConfig(path=str(tmp_path)))
    assert isinstance(remote, SGLangEngine)


def test_serve_subcommand_is_registered() -> None:
    from agentrl.cli.main import build_parser

    args = build_parser().parse_args(["serve", "--model", "m", "--port", "31000"])
    assert (args.model, args.host, args.port) == ("m", "127.0.0.1", 31000)
