"""The peer providers (MagiAttention FFA, FlashInfer, Transformer Engine's backends, FlashAttention-4) on
a CPU machine: the mask -> FFA ranges encoding against the dense masks of the registry, the argument
mappings (through stand-in library functions that compute attention on the CPU from exactly the
arguments the provider passes), and their `unavailable` reasons here."""

from __future__ import annotations

import math
import os
import sys
import types
from pathlib import Path

import pytest
import torch

from attnbench import masks
from attnbench.bench import providers
from attnbench.bench.correctness import compare, reference_attention
from attnbench.bench.providers import flash_attn4, flashinfer_prefill, magi_ffa, te, te_backends
from attnbench.bench.providers.base import Unsupported
from attnbench.rows import Workload

PEERS = ["te_flash", "te_fused", "te_unfused", "flash_attn4", "flash_attn4_compiled", "magi_ffa",
         "magi_ffa_default", "flashinfer"]  # fmt: skip
NOTES = Path(__file__).resolve().parents[2] / "scripts" / "gpu_machine_notes.yaml"
# every registered mask FFA declares the features for (the six of the mask report, block_causal too)
FFA_MASKS = tuple(
    name for name, mask in masks.REGISTRY.items() if not mask.missing(magi_ffa.MagiFFA.mask_features)
)
DOCS = (10, 30, 3, 21)  # 64 tokens; a 3-token document is shorter than a block


def _workload(mask: str, batch: int = 1, s: int = 64, window: int = 16, block: int = 8, **kw) -> Workload:
    needs = masks.get(mask).needs
    fields = {"window": window} if "window" in needs else {}
    if "doc_lens" in needs:
        fields["doc_lens"] = DOCS
    if "block" in needs:
        fields["block"] = block
    shape = {"heads_q": 4, "heads_kv": 2, "head_dim": 8, "dtype": "float32"} | kw
    return Workload(batch=batch, seqlen_q=s, seqlen_k=s, mask=mask, **shape, **fields)


def _packed_dense(w: Workload) -> torch.Tensor:
    """The registry's dense mask of each batch element on the diagonal of the packed [B*Sq, B*Sk] matrix."""
    one = masks.dense_mask(w).to(torch.int32)
    return torch.block_diag(*([one] * w.batch))


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("mask", FFA_MASKS)
def test_ffa_ranges_cover_every_allowed_pair_exactly_once(mask, batch):
    for w in (_workload(mask, batch), _workload(mask, batch, window=64, block=64)):
        rows = magi_ffa.ffa_ranges(w)
        cover = magi_ffa.dense_from_ranges(rows, w.batch * w.seqlen_q, w.batch * w.seqlen_k)
        assert torch.equal(cover, _packed_dense(w)), w.label()  # 1 on allowed pairs, 0 elsewhere
        # disable_fwd_atomic_reduction=True is only valid when no two q_ranges overlap
        assert not magi_ffa.q_ranges_overlap(rows)


def test_ffa_block_causal_has_one_row_per_block_and_causal_is_bottom_right():
    rows = magi_ffa.ffa_ranges(_workload("varlen_block_causal", block=8))
    assert len(rows) == sum(math.ceil(n / 8) for n in DOCS)
    w = Workload(1, 24, 40, 2, 2, 8, "float32", mask="causal")  # Sq != Sk: bottom-right in FFA and ours
    cover = magi_ffa.dense_from_ranges(magi_ffa.ffa_ranges(w), 24, 40)
    assert torch.equal(cover, masks.dense_mask(w).to(torch.int32))
    with pytest.raises(Unsupported, match="seqlen_q != seqlen_k"):
        magi_ffa.ffa_ranges(Workload(1, 24, 40, 2, 2, 8, "float32", mask="sliding_window", window=4))
    assert "seqlen_q != seqlen_k" in providers.get("magi_ffa").unsupported(
        Workload(1, 24, 40, 2, 2, 128, "bfloat16", mask="sliding_window", window=4), "fwd"
    )


def _fake_module(monkeypatch, name: str, **functions) -> None:
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:i])) or types.ModuleType(".".join(parts[:i]))
        monkeypatch.setitem(sys.modules, module.__name__, module)
    for key, fn in functions.items():
        setattr(sys.modules[name], key, fn)


def _dense_attention(q, k, v, allowed):
    """[tq, hq, d] x [tk, hkv, d] under a bool [tq, tk] mask (GQA by repeating heads), fp64."""
    groups = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(groups, dim=1).double() for t in (k, v))
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).to(q.dtype)


def _inputs(w: Workload):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(w.batch, w.heads_q, w.seqlen_q, w.head_dim, generator=gen)
    k, v = (torch.randn(w.batch, w.heads_kv, w.seqlen_k, w.head_dim, generator=gen) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("name", ["magi_ffa", "magi_ffa_default"])
@pytest.mark.parametrize("mask", FFA_MASKS)
def test_magi_ffa_call_computes_the_mask(monkeypatch, name, mask):
    calls = []

    def flex_flash_attn_func(q, k, v, q_ranges=None, k_ranges=None, attn_type_map=None, **kwargs):
        calls.append(kwargs)
        rows = [
            (*qr, *kr, t) for qr, kr, t in zip(q_ranges.tolist(), k_ranges.tolist(), attn_type_map.tolist())
        ]
        allowed = magi_ffa.dense_from_ranges(rows, q.shape[0], k.shape[0]) > 0
        return _dense_attention(q, k, v, allowed), None

    _fake_module(monkeypatch, "magi_attention.api", flex_flash_attn_func=flex_flash_attn_func)
    w = _workload(mask, batch=2)
    q, k, v = _inputs(w)
    prepared = providers.get(name).prepare(q, k, v, w)
    result = compare(prepared.to_canonical(prepared.run()), reference_attention(q, k, v, w), w.dtype)
    assert result.ok, result.reason
    assert calls[-1] == ({"disable_fwd_atomic_reduction": True} if name == "magi_ffa" else {})


@pytest.mark.parametrize("mask", ["full", "causal", "sliding_window"])
def test_flashinfer_prefill_arguments(monkeypatch, mask):
    def single_prefill_with_kv_cache(q, k, v, causal=False, kv_layout="NHD", window_left=-1):
        assert kv_layout == "NHD"
        i = torch.arange(q.shape[0])[:, None] + (k.shape[0] - q.shape[0])  # queries are the last positions
        j = torch.arange(k.shape[0])[None, :]
        allowed = (j <= i) if causal else torch.ones(q.shape[0], k.shape[0], dtype=torch.bool)
        if window_left >= 0:
            allowed = allowed & (j >= i - window_left)
        return _dense_attention(q, k, v, allowed)

    _fake_module(monkeypatch, "flashinfer", single_prefill_with_kv_cache=single_prefill_with_kv_cache)
    w = _workload(mask, window=5)
    q, k, v = _inputs(w)
    prepared = providers.get("flashinfer").prepare(q, k, v, w)
    result = compare(prepared.to_canonical(prepared.run()), reference_attention(q, k, v, w), w.dtype)
    assert result.ok, result.reason
    assert flashinfer_prefill.prefill_kwargs(w).get("window_left") == (
        4 if mask == "sliding_window" else None
    )


def test_flashinfer_refusals_say_why():
    fi = providers.get("flashinfer")
    w = _workload("causal", dtype="bfloat16", head_dim=128)
    for pass_ in ("bwd", "fwd_bwd"):
        assert fi.unsupported(w, pass_) == "FlashInfer's prefill API has no backward"
    assert fi.unsupported(w, "fwd") is None
    assert "batch 1" in fi.unsupported(_workload("causal", batch=2, dtype="bfloat16", head_dim=128), "fwd")
    assert "varlen_full" in fi.unsupported(_workload("varlen_full", dtype="bfloat16", head_dim=128), "fwd")


def test_flash_attn4_window_and_varlen_keywords(monkeypatch):
    assert flash_attn4.fa4_window(_workload("sliding_window", window=16)) == {
        "causal": True,
        "window_size": (15, 0),
    }
    assert flash_attn4.fa4_window(_workload("full")) == {"causal": False}
    seen = {}

    def flash_attn_varlen_func(
        q, k, v, qv=None, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal
    ):
        seen.update(qv=qv, max_seqlen_q=max_seqlen_q)
        ids = torch.repeat_interleave(torch.arange(len(cu_seqlens_q) - 1), cu_seqlens_q.diff())
        allowed = ids[:, None] == ids[None, :]
        if causal:
            allowed &= torch.arange(q.shape[0])[:, None] >= torch.arange(q.shape[0])[None, :]
        return _dense_attention(q, k, v, allowed), None

    _fake_module(monkeypatch, "flash_attn.cute", flash_attn_varlen_func=flash_attn_varlen_func)
    for mask in ("varlen_full", "varlen_causal"):
        w = _workload(mask, batch=2)
        q, k, v = _inputs(w)
        prepared = providers.get("flash_attn4").prepare(q, k, v, w)
        result = compare(prepared.to_canonical(prepared.run()), reference_attention(q, k, v, w), w.dtype)
        assert result.ok, result.reason
        assert seen == {"qv": None, "max_seqlen_q": max(DOCS)}
    compiled = providers.get("flash_attn4_compiled")
    assert "forward-only" in compiled.unsupported(
        _workload("causal", dtype="bfloat16", head_dim=128), "fwd_bwd"
    )
    assert compiled.unsupported(_workload("causal", dtype="bfloat16", head_dim=128), "fwd") is None


def test_te_backend_pins_enable_one_backend_and_restore_the_users_settings(monkeypatch):
    assert te.backend_env("fused") == {
        "NVTE_FLASH_ATTN": "0",
        "NVTE_FUSED_ATTN": "1",
        "NVTE_UNFUSED_ATTN": "0",
    }
    with pytest.raises(ValueError, match="not one of"):
        te_backends.TransformerEngineBackend("te_x", "cudnn")
    cache = {"backend_selection_requires_update": False, "use_flash_attention": False,
             "use_fused_attention": True, "fused_attention_backend": 1}  # fmt: skip
    monkeypatch.setattr(te, "_backend_cache", lambda: cache)
    monkeypatch.setenv("NVTE_FLASH_ATTN", "0")  # the user's own setting
    monkeypatch.delenv("NVTE_FUSED_ATTN", raising=False)
    monkeypatch.delenv("NVTE_UNFUSED_ATTN", raising=False)
    te.pin_backend("unfused")
    assert [os.environ[v] for v in te.BACKENDS.values()] == ["0", "0", "1"]
    assert cache["backend_selection_requires_update"] is True
    te.pin_backend("fused")
    assert te.picked_backend() == "fused (sub-backend 1)"
    te.pin_backend(None)
    assert os.environ["NVTE_FLASH_ATTN"] == "0" and "NVTE_FUSED_ATTN" not in os.environ
    cache["backend_selection_requires_update"] = False
    te.pin_backend(None)  # nothing pinned: the cache is left alone
    assert cache["backend_selection_requires_update"] is False


@pytest.mark.parametrize("name", PEERS)
def test_peer_providers_are_unavailable_here_with_install_and_machine_note(monkeypatch, name):
    provider = providers.get(name)
    monkeypatch.setenv("ATTNBENCH_PROVIDER_NOTES", str(NOTES))
    reason = provider.unavailable()
    if reason is None:
        pytest.skip(f"{name} is installed on this machine")
    assert "not installed" in reason and provider.install in reason
    assert "scripts/carry" in reason  # the GPU machine's note: what carries it there
    status, why = provider.why_not(_workload("full", dtype="bfloat16", head_dim=128), "fwd")
    assert (status, why) == ("unavailable", reason)


def test_flash_attn2_beside_flash_attn4_alone_is_not_installed(monkeypatch, tmp_path):
    # flash-attn-4's wheel has flash_attn/cute/ but no flash_attn/__init__.py: a namespace package
    (tmp_path / "flash_attn" / "cute").mkdir(parents=True)
    for name in [m for m in sys.modules if m == "flash_attn" or m.startswith("flash_attn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ATTNBENCH_PROVIDER_NOTES", str(NOTES))
    reason = providers.get("flash_attn2").unavailable()
    assert reason.startswith("not installed (only flash-attn-4's namespace package flash_attn)")
    assert "source-only" in reason  # the GPU machine's note for flash_attn


def test_flash_attn4_compiled_traces_the_forward_as_one_custom_op(monkeypatch):
    calls = []

    def flash_attn_func(q, k, v, causal=False, window_size=(None, None)):
        calls.append(window_size)
        i, j = torch.arange(q.shape[1])[:, None], torch.arange(k.shape[1])[None, :]
        allowed = (j <= i) if causal else torch.ones(q.shape[1], k.shape[1], dtype=torch.bool)
        if window_size[0] is not None:
            allowed = allowed & (j >= i - window_size[0])
        return torch.stack([_dense_attention(q[b], k[b], v[b], allowed) for b in range(q.shape[0])]), None

    _fake_module(monkeypatch, "flash_attn.cute", flash_attn_func=flash_attn_func)
    w = _workload("sliding_window", window=8)
    q, k, v = _inputs(w)
    prepared = providers.get("flash_attn4_compiled").prepare(q, k, v, w)
    result = compare(prepared.to_canonical(prepared.run()), reference_attention(q, k, v, w), w.dtype)
    assert result.ok, result.reason
    assert calls[-1] == (7, 0)
