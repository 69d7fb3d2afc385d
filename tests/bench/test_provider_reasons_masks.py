"""Why a provider cannot run, and the masks and tolerances it is given: no attention library needed."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from attnbench.bench import providers
from attnbench.bench.correctness import compare
from attnbench.bench.providers import base
from attnbench.cp.local import FlashAttn3Kernel
from attnbench.rows import Workload


def test_fa3_cp_kernel_reason_without_cuda_or_without_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn_interface", None)  # import raises ImportError
    reason = FlashAttn3Kernel().unavailable(torch.device("cpu"), torch.bfloat16, 128)
    assert "flash_attn_interface (FlashAttention-3) cannot be imported" in reason and "hopper/" in reason


def test_not_installed_reasons_name_the_install_and_this_machines_note(tmp_path, monkeypatch):
    notes = tmp_path / "notes.yaml"
    notes.write_text("transformer_engine: its 276 MB wheel is over the 64 MiB transfer limit\n")
    monkeypatch.setenv("ATTNBENCH_PROVIDER_NOTES", str(notes))
    reason = base.import_failure("ab_absent_engine.pytorch", "pip install ab-engine")
    notes.write_text("ab_absent_engine: its 276 MB wheel is over the 64 MiB transfer limit\n")
    assert base.import_failure("ab_absent_engine.pytorch", "pip install ab-engine") == (
        "not installed (no module 'ab_absent_engine'); to install: pip install ab-engine; "
        "on this machine: its 276 MB wheel is over the 64 MiB transfer limit"
    )
    assert "on this machine" not in reason  # the note is this machine's, read when asked
    assert base.import_failure("ab_absent_module_q", "pip install q") == (
        "not installed (no module 'ab_absent_module_q'); to install: pip install q"
    )
    notes.write_text(": not yaml [")
    assert "unreadable" in base.machine_note("transformer_engine")
    notes.write_text("- a list, not a mapping\n")
    assert base.machine_note("transformer_engine") == (
        f"(ATTNBENCH_PROVIDER_NOTES={notes} unreadable: not a mapping of module names to notes)"
    )


def test_every_not_installed_provider_names_what_to_install():
    for p in providers.all_providers():
        reason = p.unavailable() or ""
        if reason.startswith("not installed") and p.family not in ("hf_kernels",):
            assert "to install:" in reason, p.name


def test_xformers_op_names_are_checked():
    from attnbench.bench.providers.xformers import XFormers

    with pytest.raises(ValueError, match="unknown xFormers op 'fa9'"):
        XFormers("x", op="fa9")
    names = {p.name for p in providers.select(["xformers"])}
    assert {"xformers", "xformers_cutlass", "xformers_fa2", "xformers_fa3"} <= names


def test_fp8_output_tolerance_adds_the_output_rounding():
    from attnbench.bench.correctness import tolerance_for

    plain, fp8_out = tolerance_for("bfloat16", True), tolerance_for("bfloat16", "quantized_fp8_output")
    assert fp8_out.rel_l2 == pytest.approx(plain.rel_l2 + 2**-4)
    assert providers.get("cudnn_frontend_fp8").tolerance == "quantized_fp8_output"
    # the exact result rounded to e4m3 sits inside it, a wrong scale (x1.3) does not
    ref = torch.randn(4, 256, 64, dtype=torch.float64)
    rounded = ref.to(torch.float8_e4m3fn).double()
    assert compare(rounded, ref, "bfloat16", "quantized_fp8_output").ok
    assert not compare(rounded * 1.3, ref, "bfloat16", "quantized_fp8_output").ok


def test_reasons_follow_a_wrapped_exception_to_its_cause():
    try:
        try:
            raise ConnectionError("Failed to resolve 'huggingface.co'")
        except ConnectionError:
            raise ValueError("Kernel repository 'x' could not verify publisher trust status.") from None
    except ValueError as exc:
        assert (
            base.describe_exception(exc)
            == "ValueError: Kernel repository 'x' could not verify publisher trust status."
        )
    try:
        try:
            raise ConnectionError("Failed to resolve 'huggingface.co'")
        except ConnectionError:
            raise ValueError("could not verify publisher trust status.")  # as kernels does: no "from"
    except ValueError as exc:
        assert base.describe_exception(exc) == (
            "ValueError: could not verify publisher trust status. "
            "(from ConnectionError: Failed to resolve 'huggingface.co')"
        )


def test_fa3_says_which_masks_it_cannot_express():
    block = Workload(1, 64, 64, 4, 2, 64, "bfloat16", "varlen_block_causal", doc_lens=(10, 54), block=16)
    assert "not supported" in providers.get("flash_attn3").unsupported(block, "fwd")
    docs = Workload(1, 64, 64, 4, 2, 64, "bfloat16", "varlen_causal", doc_lens=(10, 54))
    assert "fixed-length" in providers.get("flash_attn3_compiled").unsupported(docs, "fwd")
    assert "cuDNN 9.19" in providers.get("cudnn_frontend").unsupported(docs, "fwd")
    assert providers.get("sdpa_cudnn").unsupported(docs, "fwd").startswith("mask varlen_causal not supported")


def test_xformers_bias_types_per_mask():
    from attnbench.bench.providers.xformers import _attn_bias

    made = []

    class Bias:
        def __init__(self, *args):
            made.append((type(self).__name__, args))

        @classmethod
        def from_seqlens(cls, seqlens):
            return cls(list(seqlens))

    names = ("BlockDiagonalMask", "BlockDiagonalCausalMask", "LowerTriangularFromBottomRightMask",
             "LowerTriangularFromBottomRightLocalAttentionMask")  # fmt: skip
    fake = types.SimpleNamespace(**{n: type(n, (Bias,), {}) for n in names})

    def w(mask, **kw):
        return Workload(2, 64, 64, 4, 2, 64, "bfloat16", mask, **kw)

    assert _attn_bias(fake, w("full")) is None
    _attn_bias(fake, w("causal"))
    _attn_bias(fake, w("sliding_window", window=8))
    _attn_bias(fake, w("varlen_full", doc_lens=(10, 54)))
    _attn_bias(fake, w("varlen_causal", doc_lens=(10, 54)))
    assert made == [
        ("LowerTriangularFromBottomRightMask", ()),
        ("LowerTriangularFromBottomRightLocalAttentionMask", (8,)),
        ("BlockDiagonalMask", ([10, 54, 10, 54],)),  # the batch packed into one row
        ("BlockDiagonalCausalMask", ([10, 54, 10, 54],)),
    ]
    with pytest.raises(base.Unsupported, match="no attn_bias"):
        _attn_bias(fake, w("varlen_block_causal", doc_lens=(10, 54), block=16))


def test_cudnn_frontend_band_from_the_mask():
    from attnbench.bench.providers.cudnn_frontend import _mask_kwargs

    fake = types.SimpleNamespace(diagonal_alignment=types.SimpleNamespace(TOP_LEFT="top-left"))

    def w(mask, **kw):
        return Workload(1, 64, 64, 4, 2, 64, "bfloat16", mask, **kw)

    assert _mask_kwargs(fake, w("full")) == {}
    assert _mask_kwargs(fake, w("causal")) == {
        "diagonal_alignment": "top-left",
        "diagonal_band_right_bound": 0,
    }
    assert _mask_kwargs(fake, w("sliding_window", window=8), fp8=True) == {
        "diagonal_alignment": "top-left", "right_bound": 0, "left_bound": 8,
    }  # fmt: skip
    with pytest.raises(base.Unsupported):
        _mask_kwargs(fake, w("varlen_full", doc_lens=(10, 54)))


def test_xformers_dispatch_refusal_for_a_varlen_backward_is_a_reason(monkeypatch):
    """A varlen backward is dispatched with the forward op's LSE format (xFormers asserts it is given):
    when no backward op takes it, the row is `unsupported` with xFormers' words, not an error later."""
    from attnbench.bench.providers.xformers import _dispatch_refuses

    forward_op = types.SimpleNamespace(NAME="fa3F", VARLEN_LSE_PACKED=True)

    def dispatch_bw(inputs, varlen_lse_packed):
        assert varlen_lse_packed is not None  # as xFormers does for BlockDiagonal biases
        raise NotImplementedError(
            "No operator found for `memory_efficient_attention_backward` with inputs:\n"
            "     query : shape=(1, 4096, 8, 8, 128)\n"
            "`fa3B@pip_pkg` is not supported because:\n"
            "    operator does not support BMGHK format"
        )

    dispatch = types.SimpleNamespace(
        _dispatch_fw=lambda inputs, backward: forward_op, _dispatch_bw=dispatch_bw
    )
    for name, module in (
        ("xformers", types.ModuleType("xformers")),
        ("xformers.ops", types.ModuleType("xformers.ops")),
        ("xformers.ops.fmha", types.SimpleNamespace(dispatch=dispatch)),
        ("xformers.ops.fmha.dispatch", dispatch),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    assert _dispatch_refuses(object(), backward=False) is None
    reason = _dispatch_refuses(object(), backward=True)
    assert reason.startswith("No operator found for `memory_efficient_attention_backward`")
    assert "`fa3B@pip_pkg` is not supported because:" in reason
