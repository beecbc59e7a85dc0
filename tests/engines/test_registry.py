"""The engine registry: one config model per backend, kinds from the registry, errors with their dotted keys,
what each backend provides (transport, preflight, identity), and weight directories named in one place."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from agentrl.config.sections import ModelConfig
from agentrl.engines import registry
from agentrl.engines.base import InferenceEngine
from agentrl.engines.config import EngineConfig
from agentrl.engines.embedded.config import EmbeddedEngineConfig, kv_bytes_per_token
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.engines.transport import DiskTransport, StateDictTransport
from agentrl.engines.weight_dirs import publish_weights, version_dir
from agentrl.errors import ConfigError, ModelLoadError
from agentrl.job.loader import load_config
from agentrl.rollout.fingerprint import architecture_fingerprint, rollout_fingerprints

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny_debug.yaml"


def _problems(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(TINY, list(overrides), check_env=False)
    return str(info.value)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Backends a test registers are gone afterwards."""
    saved = dict(registry._BACKENDS)
    yield
    registry._BACKENDS.clear()
    registry._BACKENDS.update(saved)


class EchoEngineConfig(EngineConfig):
    """A backend registered by a test: builds the embedded engine under another kind."""

    kind: Literal["echo"] = Field("echo", description="Test backend.")
    loud: bool = Field(False, description="A setting only this backend has.")

    def build(self, model: ModelConfig) -> InferenceEngine:
        return EmbeddedEngineConfig(max_seq_len=self.max_seq_len).build(model)


def test_kinds_come_from_the_registry_and_the_section_is_the_backends_model() -> None:
    assert registry.engine_kinds() == ["embedded", "sglang", "vllm"]
    assert isinstance(load_config(TINY, check_env=False).engine, EmbeddedEngineConfig)
    cfg = load_config(TINY, ["engine.kind=sglang", "engine.urls=[http://h:1]", "engine.max_batch_size=null"])
    assert isinstance(cfg.engine, SGLangEngineConfig) and cfg.engine.urls == ["http://h:1"]
    assert cfg.model_dump()["engine"]["urls"] == ["http://h:1"]  # the backend's own fields are dumped
    assert load_config(TINY, check_env=False).model_dump()["engine"]["max_batch_size"] == 16


def test_a_typo_in_the_kind_gets_a_did_you_mean_listing_the_kinds() -> None:
    message = _problems("engine.kind=sglan")
    assert "has 1 problem:" in message
    assert (
        "  engine.kind: unknown engine kind 'sglan' -> Did you mean 'sglang'? Registered kinds: embedded, sglang, vllm."
        in (message)
    )


def test_a_field_of_another_backend_says_whose_it_is_and_the_fix() -> None:
    message = _problems("engine.kind=sglang", "engine.urls=[http://h:1]")
    assert (
        "engine.max_batch_size: is a setting of engine.kind 'embedded', not of 'sglang' -> remove it (on the command "
        "line: engine.max_batch_size=null) or set engine.kind: embedded"
    ) in message
    assert "engine.weights_dir: is a setting of engine.kind 'sglang' / 'vllm', not of 'embedded'" in _problems(
        "engine.weights_dir=/tmp/w"
    )
    assert "Did you mean 'urls' (a setting of engine.kind 'sglang' / 'vllm')?" in _problems("engine.urlz=[http://h:1]")
    assert "engine.max_batch_sise: unknown key (value 3) -> Did you mean 'max_batch_size'?" in _problems(
        "engine.max_batch_sise=3"
    )


def test_backend_checks_join_the_cross_field_problems() -> None:
    message = _problems("engine.kind=sglang", "engine.max_batch_size=null", "trainer.mini_batches=9")
    assert "has 2 problems" in message
    assert "engine.urls: engine.kind is 'sglang' but no server URL is given -> set engine.urls" in message
    assert "engine.import_modules: cannot import 'no_such_backend_module'" in _problems(
        "engine.import_modules=[no_such_backend_module]"
    )
    assert "engine: must be a mapping of engine settings, got 'sglang'" in _problems("engine=sglang")


def test_a_registered_backend_is_selectable_by_kind(clean_registry: None) -> None:
    with pytest.raises(ConfigError, match="unknown engine kind 'echo'"):
        load_config(TINY, ["engine.kind=echo"], check_env=False)
    assert registry.register_engine(EchoEngineConfig) is EchoEngineConfig
    cfg = load_config(TINY, ["engine.kind=echo", "engine.loud=true", "engine.max_batch_size=null"], check_env=False)
    assert isinstance(cfg.engine, EchoEngineConfig) and cfg.engine.loud
    assert "Registered kinds: echo, embedded, sglang, vllm" in _problems("engine.kind=ech0")
    assert isinstance(cfg.engine.weight_transport(Path("run")), StateDictTransport)  # the base's default
    assert asyncio.run(cfg.engine.preflight(cfg.model)) == ["engine echo: no checks before it starts"]


def test_registration_refuses_what_cannot_be_a_backend(clean_registry: None) -> None:
    class Clash(EchoEngineConfig):
        """Another class claiming a kind already taken."""

        kind: Literal["sglang"] = Field("sglang", description="Taken.")

    class NoKind(EngineConfig):
        """No default kind."""

        def build(self, model: ModelConfig) -> InferenceEngine:
            raise NotImplementedError

    with pytest.raises(ConfigError, match="'sglang' is registered by agentrl.engines.sglang.config.SGLangEngineConfig"):
        registry.register_engine(Clash)
    with pytest.raises(ConfigError, match="needs a default naming the backend"):
        registry.register_engine(NoKind)
    with pytest.raises(ConfigError, match="takes an EngineConfig subclass"):
        registry.register_engine(dict)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="abstract"):
        EngineConfig(kind="x")  # type: ignore[abstract]


def test_every_backend_field_is_documented() -> None:
    undocumented = [
        f"{kind}.{name}"
        for kind in registry.engine_kinds()
        for name, field in registry.engine_config_class(kind).model_fields.items()
        if not field.description
    ]
    assert undocumented == []


def test_each_backend_names_its_weight_transport(tmp_path: Path) -> None:
    assert EmbeddedEngineConfig().weight_transport(tmp_path) == StateDictTransport()
    sglang = SGLangEngineConfig(urls=["http://h:1"])
    assert sglang.weight_transport(tmp_path) == DiskTransport(tmp_path / "weights")
    assert sglang.model_copy(update={"weights_dir": "/shared/w"}).weight_transport(tmp_path) == DiskTransport(
        Path("/shared/w")
    )
    assert sglang.model_copy(update={"weight_transfer": "tensor"}).weight_transport(tmp_path) == StateDictTransport()


def test_embedded_preflight_checks_without_loading(tiny_model_dir: Path, tmp_path: Path) -> None:
    import json

    from agentrl.engines.embedded.kv_cache import max_cols_bound

    config = EmbeddedEngineConfig(max_batch_size=8, max_seq_len=512, prefix_cache_tokens=1024)
    (line,) = asyncio.run(config.preflight(ModelConfig(path=str(tiny_model_dir), device="cpu")))
    per_token = kv_bytes_per_token(json.loads((tiny_model_dir / "config.json").read_text()), 4)
    columns = max_cols_bound(512)  # the bound the slot cache keeps (tests/engines/test_kv_memory_bound.py)
    stated = f"{per_token * 8 * columns / 1024**3:.2f} GiB (8 rows x {columns} columns for 512-token sequences)"
    assert per_token > 0 and stated in line
    assert line.startswith(f"engine embedded: loads {tiny_model_dir} in process on cpu (float32)")
    with pytest.raises(ModelLoadError, match="make-model"):
        asyncio.run(config.preflight(ModelConfig(path=str(tmp_path / "none"), device="cpu")))


def test_model_identity_gives_the_same_fingerprint_as_the_model(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tiny_tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = ModelConfig(path=str(tiny_model_dir), device="cpu")
    embedded = EmbeddedEngineConfig().build(model)
    try:
        identity = embedded.model_identity()
        assert identity.path == str(tiny_model_dir) and identity.hf_config["vocab_size"] > 0
        expected = architecture_fingerprint(embedded.runner.model.config)
        assert rollout_fingerprints(tiny_tokenizer, embedded)["architecture"] == expected
    finally:
        asyncio.run(embedded.close())
    client = SGLangEngineConfig(urls=["http://127.0.0.1:1"]).build(model)
    assert isinstance(client, SGLangEngine) and client.model_identity().path == str(tiny_model_dir)
    assert rollout_fingerprints(tiny_tokenizer, client)["architecture"] == expected  # read from model.path


def test_weight_directories_have_one_name_and_one_atomic_writer(tmp_path: Path) -> None:
    (tmp_path / "venv").mkdir()  # not a version: never pruned

    def write(directory: Path) -> None:
        assert directory.name.startswith(".tmp-") and not version_dir(tmp_path, 3).exists()
        (directory / "model.safetensors").write_bytes(b"x")

    for version in (1, 2, 3):
        assert publish_weights(tmp_path, version, write) == version_dir(tmp_path, version)
    assert version_dir(tmp_path, 3).name == "v000003"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v000002", "v000003", "venv"]
