"""The provider registry on a CPU machine: names, reasons, capability checks, and the CPU providers' math."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from attnbench import masks
from attnbench.bench import providers
from attnbench.bench.correctness import compare, reference_attention, reference_grads
from attnbench.bench.providers import base, hf_kernels, sage
from attnbench.rows import Workload

FAMILIES = {"sdpa", "flex", "flash_attn", "flash_attn3", "hf_kernels", "sage", "te", "xformers"}


def test_registry_names_unique_and_every_family_present():
    names = [p.name for p in providers.all_providers()]
    assert len(names) == len(set(names))
    assert FAMILIES <= set(providers.families())
    for wanted in (
        "sdpa_flash",
        "sdpa_efficient",
        "sdpa_cudnn",
        "sdpa_math",
        "sdpa_compiled",
        "sdpa_compiled_max_autotune",
        "flex",
        "flash_attn2",
        "flash_attn2_compiled",
        "flash_attn3",
        "flash_attn3_compiled",
        "hf_flash_attn",
        "hf_flash_attn3",
        "sage_sageattn",
        "te_bshd",
        "xformers",
        "xformers_compiled",
    ):
        assert providers.get(wanted).name == wanted
    with pytest.raises(KeyError, match="no provider 'nope'"):
        providers.get("nope")
    assert {p.family for p in providers.select(["sage"])} == {"sage"}
    with pytest.raises(KeyError, match="'nope'"):
        providers.select(["nope"])


def test_availability_reasons_are_strings_and_never_raise():
    cuda = torch.cuda.is_available()
    for p in providers.all_providers():
        reason = p.unavailable()
        assert reason is None or (isinstance(reason, str) and reason), p.name
        assert isinstance(p.version(), str)
        if not cuda and p.needs_cuda:
            assert reason, f"{p.name} claims to run without CUDA"
            assert "needs CUDA" in reason or reason.startswith(("not installed", "import failed")), reason
    assert providers.get("sdpa_math").unavailable() is None  # what the smoke profile runs


def test_import_failures_name_the_cause(tmp_path, monkeypatch):
    (tmp_path / "ab_broken_mod.py").write_text("raise RuntimeError('boom\\nsecond line')\n")
    (tmp_path / "ab_needs_dep.py").write_text("import ab_missing_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert base.import_failure("ab_broken_mod") == "import failed: RuntimeError: boom"
    assert base.import_failure("ab_needs_dep") == (
        "import failed: ModuleNotFoundError: No module named 'ab_missing_dependency_xyz'"
    )
    assert base.import_failure("ab_not_there_at_all") == "not installed (no module 'ab_not_there_at_all')"
    assert base.import_failure("json") is None


def _strict_get_kernel(outcome):
    """kernels >= 0.15's rule: a Hub kernel needs version= or revision= (else ValueError, before any
    download); then `outcome(repo)` stands for the download."""

    def get_kernel(repo, revision=None, version=None):
        if revision is None and version is None:
            raise ValueError(f"Hub kernel {repo} must be loaded with a version or a revision")
        return outcome(repo)

    return get_kernel


def test_hf_kernels_reason_names_repo_and_network(monkeypatch):
    fake = types.ModuleType("kernels")

    def offline(repo):
        raise ConnectionError(f"Failed to resolve 'huggingface.co' for {repo}\nretries exhausted")

    get_kernel = _strict_get_kernel(offline)

    fake.get_kernel = get_kernel
    monkeypatch.setitem(sys.modules, "kernels", fake)
    monkeypatch.setattr(hf_kernels, "cuda_missing", lambda: None)
    monkeypatch.setattr(hf_kernels, "_LOADED", {})
    reason = providers.get("hf_flash_attn3").unavailable()
    assert reason.startswith(
        "get_kernel('kernels-community/flash-attn3', version=1) failed (the Hugging Face Hub cannot be reached"
    )
    assert "ConnectionError: Failed to resolve 'huggingface.co'" in reason  # got past the version check
    assert "retries" not in reason  # first line only


def test_sage_lists_entry_points_the_installed_version_lacks(monkeypatch):
    fake = types.ModuleType("sageattention")
    fake.__version__ = "1.0.6"
    fake.sageattn = lambda *a, **k: None
    fake.sageattn_varlen = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, "sageattention", fake)
    monkeypatch.setattr(sage, "cuda_missing", lambda: None)
    assert providers.get("sage_sageattn").unavailable() is None
    assert providers.get("sage_sageattn_varlen").unavailable() is None
    said = providers.get("sage_qk_int8_pv_fp16_triton").unavailable()
    assert said.startswith(
        "sageattention 1.0.6 has no sageattn_qk_int8_pv_fp16_triton: SageAttention 2 added it"
    )
    assert (
        "pip install --no-build-isolation git+https://github.com/thu-ml/SageAttention" in said
    )  # the remedy
    assert all(p.quantized for p in providers.select(["sage"]))


def W(sq=256, sk=256, hq=4, hkv=4, d=64, dtype="bfloat16", mask="full", **kw):
    return Workload(1, sq, sk, hq, hkv, d, dtype, mask, **kw)


def test_unsupported_workloads_have_reasons():
    flash, math_ = providers.get("sdpa_flash"), providers.get("sdpa_math")
    sage_ = providers.get("sage_sageattn")
    assert "bottom-right" in flash.unsupported(W(sq=128, mask="causal"), "fwd")
    assert flash.unsupported(W(mask="causal"), "fwd") is None
    assert math_.unsupported(W(sq=128, mask="causal"), "fwd") is None  # explicit mask: any alignment
    assert "dtype float32" in flash.unsupported(W(dtype="float32"), "fwd")
    assert "mask document" in flash.unsupported(W(mask="document", doc_lens=(100, 156)), "fwd")
    assert sage_.unsupported(W(), "fwd_bwd") == "no backward"
    assert "head_dim 256" in sage_.unsupported(W(d=256), "fwd")
    sliding = W(sq=128, mask="sliding_window", window=64)
    assert providers.get("flash_attn2").unsupported(sliding, "fwd") is None

    class NoGqa(base.Provider):
        name, family, needs_cuda = "plain", "test", False

    assert NoGqa().why_not(W(hq=4, hkv=2), "fwd") == ("unsupported", "GQA (heads_kv < heads_q) not supported")
    assert NoGqa().why_not(W(), "fwd_bwd") == ("unsupported", "no backward")
    assert NoGqa().why_not(W(), "fwd") is None


@pytest.mark.parametrize("provider", providers.all_providers(), ids=lambda p: p.name)
def test_each_providers_masks_are_derived_from_its_declared_features(provider):
    assert set(provider.mask_features) <= set(masks.FEATURES), "a feature the mask registry does not know"
    runs = provider.supported_masks()
    for name, mask in masks.REGISTRY.items():
        lacking = [f for f in mask.requires if f not in provider.mask_features]
        expected = masks.ANY_MASK in provider.mask_features or not lacking
        assert (name in runs) == expected, f"{provider.name} / {name}: requires {mask.requires}"
        gap = provider.mask_gap(name)
        assert (gap is None) == expected
        if gap:  # the reason names the first missing feature and the provider
            assert lacking[0] in gap and provider.name in gap
    assert "full" in runs and "causal" in runs  # every attention provider has at least a causal flag


def test_a_mask_needing_a_feature_nobody_declares_runs_only_where_any_mask_mod_runs(monkeypatch):
    from attnbench.masks import base

    monkeypatch.setitem(base.FEATURES, "a_test_feature", "a feature no provider declares")
    features_nobody_has = masks.Mask("needs_block", "test", build=lambda w, d: None, count=lambda w: 0,
                                     requires=("a_test_feature",))  # fmt: skip
    masks.register(features_nobody_has)
    try:
        runners = {p.name for p in providers.all_providers() if "needs_block" in p.supported_masks()}
    finally:
        masks.unregister("needs_block")
    assert runners == {p.name for p in providers.all_providers() if masks.ANY_MASK in p.mask_features}
    assert {"flex", "sdpa_math"} <= runners


CPU_CASES = [
    W(sq=96, sk=96, hq=4, hkv=2, d=32, dtype="float32"),
    W(sq=64, sk=96, hq=2, hkv=2, d=32, dtype="float32", mask="causal"),
    W(sq=96, sk=96, hq=2, hkv=2, d=32, dtype="float32", mask="sliding_window", window=17),
    W(sq=96, sk=96, hq=2, hkv=1, d=32, dtype="float32", mask="document", doc_lens=(30, 66)),
    W(sq=96, sk=96, hq=2, hkv=2, d=32, dtype="bfloat16", mask="causal"),
]


def _inputs(w: Workload, seed=0):
    gen = torch.Generator().manual_seed(seed)
    dt = getattr(torch, w.dtype)
    q = torch.randn(w.batch, w.heads_q, w.seqlen_q, w.head_dim, generator=gen).to(dt)
    k = torch.randn(w.batch, w.heads_kv, w.seqlen_k, w.head_dim, generator=gen).to(dt)
    v = torch.randn(w.batch, w.heads_kv, w.seqlen_k, w.head_dim, generator=gen).to(dt)
    return q, k, v


@pytest.mark.parametrize("name", ["sdpa_math", "flex_eager"])
@pytest.mark.parametrize("w", CPU_CASES, ids=lambda w: w.label())
def test_cpu_providers_match_reference(name, w):
    provider = providers.get(name)
    assert provider.why_not(w, "fwd") is None
    q, k, v = _inputs(w)
    prepared = provider.prepare(q, k, v, w)
    result = compare(prepared.to_canonical(prepared.run()), reference_attention(q, k, v, w), w.dtype)
    assert result.ok, result.reason
    assert not any(t.requires_grad for t in prepared.inputs)


def test_sdpa_math_backward_matches_reference_grads():
    w = W(sq=64, sk=96, hq=4, hkv=2, d=32, dtype="float32", mask="causal")
    q, k, v = _inputs(w, seed=1)
    prepared = providers.get("sdpa_math").prepare(q, k, v, w, backward=True)
    assert all(t.requires_grad and t.is_leaf for t in prepared.inputs)
    out = prepared.run()
    dout = torch.randn_like(out)
    out.backward(dout)
    for got, want in zip((t.grad for t in prepared.inputs), reference_grads(q, k, v, dout, w)):
        assert compare(got, want, w.dtype, grad=True).ok


def test_flex_eager_backward_on_cpu_is_unsupported_not_an_error():
    w = CPU_CASES[0]
    with pytest.raises(providers.Unsupported, match="no backward on CPU"):
        providers.get("flex_eager").prepare(*_inputs(w), w, backward=True)


def test_a_broken_kernel_is_caught_by_the_comparison():
    """Sanity of the chain the sweep relies on: a wrong mask gives a failing comparison."""
    w = CPU_CASES[1]
    q, k, v = _inputs(w)
    full = W(sq=64, sk=96, hq=2, hkv=2, d=32, dtype="float32")
    prepared = providers.get("sdpa_math").prepare(q, k, v, full)  # causal workload run unmasked
    assert not compare(prepared.run(), reference_attention(q, k, v, w), w.dtype).ok


def test_hf_kernels_reason_without_the_package_says_what_else_it_needs(monkeypatch):
    monkeypatch.setattr(hf_kernels, "import_failure", lambda module: "not installed (no module 'kernels')")
    reason = providers.get("hf_flash_attn").unavailable()
    assert reason.startswith(
        "not installed (no module 'kernels'): pip install kernels; then "
        "get_kernel('kernels-community/flash-attn', version=1)"
    )
    assert "Hugging Face Hub" in reason


def test_hf_kernels_reason_when_the_build_lacks_the_function(monkeypatch):
    fake = types.ModuleType("kernels")
    built = types.SimpleNamespace(mha_fwd=None, mha_bwd=None)
    fake.get_kernel = _strict_get_kernel(lambda repo: built)
    monkeypatch.setitem(sys.modules, "kernels", fake)
    monkeypatch.setattr(hf_kernels, "cuda_missing", lambda: None)
    monkeypatch.setattr(hf_kernels, "_LOADED", {})
    reason = providers.get("hf_flash_attn").unavailable()
    assert reason == (
        "loaded kernels-community/flash-attn, but kernels-community/flash-attn has no "
        "flash_attn_func (it has: mha_bwd, mha_fwd)"
    )


def _fake_sageattention(monkeypatch):
    """sageattention 1.0.6's calling conventions, computing exactly, and smoothing K in place as it does."""
    fake = types.ModuleType("sageattention")
    fake.__version__ = "1.0.6"

    def sageattn(q, k, v, tensor_layout="HND", is_causal=False, **kwargs):
        seq_dim = 1 if tensor_layout == "NHD" else 2
        k -= k.mean(dim=seq_dim, keepdim=True)  # in place, like the real one
        if tensor_layout == "NHD":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        return out.transpose(1, 2) if tensor_layout == "NHD" else out

    def sageattn_varlen(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, **kwargs):
        k -= k.mean(dim=0, keepdim=True)
        outs = []
        for start, end in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
            segment = [t[start:end].transpose(0, 1) for t in (q, k, v)]
            outs.append(
                torch.nn.functional.scaled_dot_product_attention(*segment, is_causal=is_causal).transpose(
                    0, 1
                )
            )
        return torch.cat(outs)

    fake.sageattn, fake.sageattn_varlen = sageattn, sageattn_varlen
    monkeypatch.setitem(sys.modules, "sageattention", fake)
    monkeypatch.setattr(sage, "cuda_missing", lambda: None)


@pytest.mark.parametrize("name", ["sage_sageattn", "sage_sageattn_nhd", "sage_sageattn_varlen"])
@pytest.mark.parametrize("heads", [1, 4])  # one head: the bshd transpose is contiguous already
def test_sage_never_smooths_the_callers_k(monkeypatch, name, heads):
    _fake_sageattention(monkeypatch)
    w = W(sq=64, sk=64, hq=heads, hkv=heads, d=64, dtype="float32")
    q, k, v = _inputs(w)
    k_before = k.clone()
    prepared = providers.get(name).prepare(q, k, v, w)
    for _ in range(2):
        out = prepared.to_canonical(prepared.run())
    assert torch.equal(k, k_before), "sage's in-place smoothing reached the shared canonical K"
    assert compare(out, reference_attention(q, k, v, w), w.dtype, quantized=True).ok
    assert "timed call = the sageattn API" in prepared.note and "int8" in prepared.note
