"""The lean forward: used for Llama / Qwen2 / Qwen3, same logits as the HF forward, HF fallback otherwise.

Models are small random-weight ones built from configs (no downloads); each runs prefill, decode, a row
joining and one leaving through a ModelRunner, once on the lean path and once on HF's forward.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentrl.engines.embedded.runner import ModelRunner
from agentrl.engines.embedded.weights import copy_state_dict

# fp32 logits of the lean path vs HF's forward (and vs full-sequence references): measured 0.6-1.5e-7 on
# these shapes; docs/engines.md states this bound.
TOL = 1e-6
_SHAPE = dict(
    vocab_size=300,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)


def _model(kind: str, **extra: object) -> torch.nn.Module:
    import transformers

    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[kind]
    torch.manual_seed(0)
    model = model_cls(config_cls(**{**_SHAPE, **extra})).eval()
    with torch.no_grad():  # HF initialises biases to zero, which would hide a bias dropped on the way
        for param in (p for name, p in model.named_parameters() if name.endswith(".bias")):
            param.normal_(0.0, 0.1)
    return model


def _run(runner: ModelRunner, steps: int = 12) -> list[torch.Tensor]:
    """Prefill two prompts, decode greedily; a third prompt joins at step 4 and row 0 leaves at step 8."""
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 300, (n,), generator=gen).tolist() for n in (5, 11, 23)]
    seqs = [list(p) for p in prompts[:2]]
    outs = [runner.prefill(prompts[:2])]
    seqs = [s + [int(t)] for s, t in zip(seqs, outs[-1].argmax(-1))]
    for step in range(steps):
        if step == 4:
            outs.append(runner.prefill([prompts[2]]))
            seqs.append(prompts[2] + [int(outs[-1][0].argmax())])
        if step == 8:
            runner.remove_row(0)
            seqs[0] = seqs.pop()
        outs.append(runner.decode([s[-1] for s in seqs]))
        seqs = [s + [int(t)] for s, t in zip(seqs, outs[-1].argmax(-1))]
    return outs


def _max_gap(model: torch.nn.Module) -> float:
    lean = ModelRunner(model, max_seq_len=256)
    assert lean.lean is not None, lean.lean_reason
    reference = _run(ModelRunner(model, max_seq_len=256, lean=False))
    return max((a - b).abs().max().item() for a, b in zip(_run(lean), reference))


def test_tiny_model_runs_the_lean_path_and_matches_hf(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    runner = ModelRunner(model, max_seq_len=512)
    assert runner.lean is not None and runner.lean_reason is None
    assert runner.lean.qk_norm  # Qwen3's per-head q/k RMSNorm is applied
    assert _max_gap(model) <= TOL


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("llama", {"tie_word_embeddings": False}),
        (
            "llama",
            {
                "attention_bias": True,
                "mlp_bias": True,
                "rope_parameters": {
                    "rope_type": "llama3",
                    "rope_theta": 10000.0,
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                },
            },
        ),
        ("qwen2", {"tie_word_embeddings": True}),
        (
            "qwen3",
            {
                "num_key_value_heads": 4,
                "head_dim": 16,
                "rope_parameters": {"rope_type": "linear", "rope_theta": 5000.0, "factor": 2.0},
            },
        ),
    ],
    ids=["llama-untied", "llama-bias-llama3rope", "qwen2-bias-tied", "qwen3-mha-linearrope"],
)
def test_lean_matches_hf_across_the_family(kind: str, extra: dict[str, object]) -> None:
    assert _max_gap(_model(kind, **extra)) <= TOL


def test_in_place_weight_update_is_seen_by_the_lean_path() -> None:
    model = _model("llama")
    runner = ModelRunner(model, max_seq_len=64)
    before = runner.prefill([[1, 2, 3]])
    runner.clear()
    new_state = {k: v + 0.01 * torch.randn_like(v) for k, v in model.state_dict().items()}
    copy_state_dict(model, new_state)
    after = runner.prefill([[1, 2, 3]])
    with torch.no_grad():
        expected = model(torch.tensor([[1, 2, 3]])).logits[:, -1]
    assert (after - before).abs().max().item() > 1e-3
    assert (after - expected).abs().max().item() <= TOL


def test_unsupported_models_fall_back_to_the_hf_forward() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    sliding = _model("qwen2", use_sliding_window=True, sliding_window=16, max_window_layers=0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=128)).eval()
    hooked = _model("llama")
    hooked.model.layers[0].mlp.register_forward_hook(lambda *args: None)
    reasons = {
        name: ModelRunner(m, max_seq_len=64).lean_reason
        for name, m in (("sliding", sliding), ("gpt2", gpt2), ("hooked", hooked))
    }
    assert "sliding" in reasons["sliding"]
    assert "GPT2LMHeadModel" in reasons["gpt2"]
    assert "hooks" in reasons["hooked"]
    runner = ModelRunner(hooked, max_seq_len=64)  # the fallback still gives the model's own logits
    logits = runner.prefill([[5, 6, 7]])
    with torch.no_grad():
        expected = hooked(torch.tensor([[5, 6, 7]])).logits[:, -1]
    assert runner.lean is None and (logits - expected).abs().max().item() <= TOL


def test_fused_projections_are_the_models_own_parameters() -> None:
    """q/k/v (and gate/up) become row views of one buffer: no copy; re-pointed parameters are re-fused."""
    model = _model("qwen2")
    runner = ModelRunner(model, max_seq_len=64)
    attn = model.model.layers[0].self_attn
    storage = attn.q_proj.weight.untyped_storage().data_ptr()
    assert attn.k_proj.weight.untyped_storage().data_ptr() == storage
    assert attn.v_proj.weight.untyped_storage().data_ptr() == storage
    assert attn.q_proj.bias.untyped_storage().data_ptr() == attn.v_proj.bias.untyped_storage().data_ptr()
    fresh = {k: v.clone() + 0.01 for k, v in model.state_dict().items()}
    model.load_state_dict(fresh, assign=True)  # new parameter tensors: the lean path must follow them
    logits = runner.prefill([[4, 5, 6, 7]])
    with torch.no_grad():
        expected = model(torch.tensor([[4, 5, 6, 7]])).logits[:, -1]
    assert (logits - expected).abs().max().item() <= TOL


def test_equal_length_rows_decode_without_a_mask_and_match_hf() -> None:
    """Rows of one length need no mask (the lean path passes None); logits still match HF's forward."""
    model = _model("qwen3")
    prompts = torch.randint(0, 300, (3, 7), generator=torch.Generator().manual_seed(4)).tolist()

    def run(runner: ModelRunner) -> list[torch.Tensor]:
        outs = [runner.prefill(prompts)]
        for _ in range(6):
            outs.append(runner.decode(outs[-1].argmax(-1).tolist()))
        return outs

    lean = ModelRunner(model, max_seq_len=64)
    lean.prefill(prompts)
    lo = lean.cache.begin_decode()
    assert lean.cache.decode_mask(lo, torch.float32, torch.device("cpu")) is None
    lean.clear()
    got, reference = run(lean), run(ModelRunner(model, max_seq_len=64, lean=False))
    assert max((a - b).abs().max().item() for a, b in zip(got, reference)) <= TOL


def test_in_place_update_between_decode_steps_reaches_every_weight() -> None:
    """A weight update lands between two decode steps (no prefill in between), q/k norm weights included:
    the lean step after it equals HF's forward over the same cache contents under the new weights."""
    import copy

    model = _model("qwen3")
    untouched = copy.deepcopy(model)
    runners = [
        ModelRunner(m, max_seq_len=64, lean=lean) for m, lean in ((model, True), (model, False), (untouched, True))
    ]
    for runner in runners:  # identical caches built under the old weights
        runner.prefill([[3, 9, 27, 81]])
        runner.decode([5])
    generator = torch.Generator().manual_seed(5)
    copy_state_dict(
        model, {k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in model.state_dict().items()}
    )
    lean_logits, hf_logits, old_logits = (runner.decode([7]) for runner in runners)
    assert (lean_logits - hf_logits).abs().max().item() <= TOL
    assert (lean_logits - old_logits).abs().max().item() > 1e-3  # the update changed what the step computes


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "hf"])
def test_extend_from_kept_keys_values_matches_a_full_prefill(lean: bool) -> None:
    """A row's keys/values, copied out and extended by new tokens later (the prefix cache's path), give
    the logits of prefilling the whole sequence, next to other rows of different lengths."""
    model = _model("qwen3")
    runner = ModelRunner(model, max_seq_len=128, lean=lean)
    history = [3, 1, 4, 1, 5, 9, 2, 6]
    runner.prefill([history, [7, 7, 7]])
    for token in (8, 9):  # row 0 decodes two tokens next to a shorter row
        runner.decode([token, 5])
        history.append(token)
    kept = runner.row_kv(0)  # holds every fed token: the prompt and both decoded ones
    runner.remove_row(0)
    runner.decode([6])  # the other row goes on, so the columns shift before the extension
    suffix = [11, 12, 13, 14]
    got = runner.extend(kept, suffix)
    expected = ModelRunner(model, max_seq_len=128, lean=lean).prefill([history + suffix])
    assert kept[0][0].shape[1] == len(history)
    assert (got - expected).abs().max().item() <= TOL
    after = runner.decode([6, 15])  # and both rows decode on together
    with torch.no_grad():
        reference = model(torch.tensor([history + suffix + [15]])).logits[0, -1]
    assert (after[1] - reference).abs().max().item() <= TOL


def test_mixed_step_decodes_and_admits_fresh_and_extended_rows_in_one_pass() -> None:
    """One lean pass decodes two running rows, prefills two fresh prompts of different lengths and
    extends a kept prefix; every row's logits equal HF's (which needs three passes), then and after."""
    model = _model("qwen3")
    lean, hf = ModelRunner(model, max_seq_len=128), ModelRunner(model, max_seq_len=128, lean=False)
    gen = torch.Generator().manual_seed(6)
    running = [torch.randint(0, 300, (n,), generator=gen).tolist() for n in (6, 13)]
    kept_seq = torch.randint(0, 300, (9,), generator=gen).tolist()
    fresh = [torch.randint(0, 300, (n,), generator=gen).tolist() for n in (4, 11)]
    suffix = [21, 22, 23]
    outs = {}
    for name, runner in (("lean", lean), ("hf", hf)):
        runner.prefill([kept_seq])
        kept = runner.row_kv(0)
        runner.remove_row(0)
        runner.prefill(running)
        mixed = runner.step([1, 2], [(None, fresh[0]), (None, fresh[1]), (kept, suffix)])
        after = runner.decode([3, 4, 5, 6, 7])
        outs[name] = (mixed, after)
    assert outs["lean"][0].shape == (5, 300)
    for a, b in zip(outs["lean"], outs["hf"]):
        assert (a - b).abs().max().item() <= TOL
    with torch.no_grad():  # and against plain full-sequence forwards
        full = [running[0] + [1, 3], running[1] + [2, 4], fresh[0] + [5], fresh[1] + [6], kept_seq + suffix + [7]]
        expected = torch.stack([model(torch.tensor([seq])).logits[0, -1] for seq in full])
    assert (outs["lean"][1] - expected).abs().max().item() <= TOL


@pytest.mark.parametrize("kind", ["llama-bias", "qwen2", "qwen3"])
def test_weight_left_products_match_hf_at_every_row_count(kind: str) -> None:
    """Every step weight-left (prefill included), one row alone then several: HF's logits within TOL.

    A single row runs as two identical columns, biases and residuals ride on the transposed product."""
    extra = {"attention_bias": True, "mlp_bias": True} if kind == "llama-bias" else {}
    model = _model(kind.removesuffix("-bias"), **extra)
    everywhere = ModelRunner(model, max_seq_len=256, weight_left_rows=10**6)
    nowhere = ModelRunner(model, max_seq_len=256, weight_left_rows=0)
    assert everywhere.lean is not None and everywhere.lean.weight_left_rows == 10**6
    reference = ModelRunner(model, max_seq_len=256, lean=False)

    def one_row(runner: ModelRunner) -> list[torch.Tensor]:
        outs = [runner.prefill([[9, 8, 7, 6]])]
        return outs + [runner.decode([int(outs[-1].argmax())]) for _ in range(3)]

    expected = one_row(reference)
    for runner in (everywhere, nowhere):
        assert max((a - b).abs().max().item() for a, b in zip(one_row(runner), expected)) <= TOL
    mixed = ModelRunner(model, max_seq_len=256, weight_left_rows=10**6)  # prefills, a join and a leave
    reference = ModelRunner(model, max_seq_len=256, lean=False)
    assert max((a - b).abs().max().item() for a, b in zip(_run(mixed), _run(reference))) <= TOL


def test_weight_left_rows_default_is_float32_on_cpu_only() -> None:
    from agentrl.engines.embedded.lean_forward import default_weight_left_rows

    cpu = torch.device("cpu")
    assert default_weight_left_rows(torch.float32, cpu) == 8
    assert default_weight_left_rows(torch.bfloat16, cpu) == 0
    assert default_weight_left_rows(torch.float32, torch.device("cuda")) == 0
    assert ModelRunner(_model("llama"), max_seq_len=64).lean.weight_left_rows == 8
