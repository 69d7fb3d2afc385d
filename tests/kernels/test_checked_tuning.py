"""Correctness-checked autotuning (kernels/flash_attention2/checked_tuning.py), on the CPU: Triton's
autotuner under the interpreter with the hooks, and the checks on our kernel's real outputs."""

from __future__ import annotations

import math

import pytest
import torch

# isort: off
# first: without a GPU it sets TRITON_INTERPRET=1, which triton must see when it is imported
from attnbench.kernels.flash_attention2 import attention_backward, attention_forward, checked_tuning
import triton
import triton.language as tl

# isort: on
from attnbench.kernels.flash_attention2.backward import DQ_ATOMIC_ADD, DQ_OWN_KERNEL
from attnbench.kernels.flash_attention2.checked_tuning import REL_L2_LIMIT, CheckedTuning


@triton.jit
def _scaled_copy(X, Y, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n) * FACTOR, mask=offs < n)


def _copy_tuned(tuning: CheckedTuning, factors: list[float]):
    """_scaled_copy autotuned over FACTOR (1.0 is right, anything else wrong) with the hooks of `tuning`."""
    return triton.autotune(
        configs=[triton.Config({"FACTOR": f}) for f in factors],
        key=["n"], do_bench=tuning.do_bench, post_hook=tuning.post_hook,
    )(_scaled_copy)  # fmt: skip


def _copy_check(nargs) -> dict:
    return {"y": checked_tuning.rel_l2(nargs["Y"], nargs["X"])}


def test_the_autotuner_never_keeps_a_wrong_tile_however_fast():
    """Two candidates of a copy kernel: FACTOR 3 is wrong and timed faster, FACTOR 1 right and slower.
    Triton's autotuner, with the hooks, keeps the right one and names the wrong one."""
    timed = {3.0: 1.0, 1.0: 2.0}
    last = {}

    def check(nargs):
        last["factor"] = nargs["FACTOR"]
        return _copy_check(nargs)

    def bench(call, quantiles):
        call()
        return [timed[last["factor"]]] * len(quantiles)

    tuning = CheckedTuning("copy", check, bench)
    tuned = _copy_tuned(tuning, [3.0, 1.0])
    x = torch.randn(100)
    y = torch.empty_like(x)
    tuned[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100, BLOCK=64)
    (chosen,) = tuned.cache.values()
    assert chosen.kwargs["FACTOR"] == 1.0
    torch.testing.assert_close(y, x)
    assert len(tuning.rejected) == 1 and tuning.rejected[0].kernel == "copy"
    assert tuning.rejected[0].errors["y"] == pytest.approx(2.0)


def test_a_launch_outside_tuning_is_not_checked_and_nan_is_wrong():
    calls = []
    tuning = CheckedTuning(
        "k", lambda nargs: calls.append(nargs) or {"out": math.nan}, lambda c, q: [0.5] * 3
    )
    tuning.post_hook({"Q": 1}, exception=None)  # a launch with the best tile after tuning: no check
    assert calls == []
    assert (
        tuning.do_bench(lambda: tuning.post_hook({"BLOCK_M": 64, "num_warps": 4}), (0.5, 0.2, 0.8))
        == [math.inf] * 3
    )
    assert tuning.rejected[0].config == "BLOCK_M=64 num_warps=4" and math.isnan(
        tuning.rejected[0].errors["out"]
    )
    assert "out rel_l2 nan" in tuning.rejected[0].text()
    tuning.post_hook({"Q": 1}, exception=None)
    assert len(calls) == 1  # disarmed again after do_bench


@pytest.mark.parametrize("heads,kv_heads", [(2, 2), (4, 2)])
def test_the_checks_pass_our_kernel_and_fail_a_wrong_result(heads, kv_heads):
    """Our kernel's forward and backward (interpreter) pass against PyTorch's attention, GQA included; a
    result off by a scale, or with two heads swapped, fails."""
    torch.manual_seed(0)
    q = torch.randn(1, heads, 64, 16, dtype=torch.bfloat16)
    k, v = (torch.randn(1, kv_heads, 64, 16, dtype=torch.bfloat16) for _ in range(2))
    dout = torch.randn_like(q)
    scale = 0.25
    out, lse = attention_forward(q, k, v, True, sm_scale=scale)
    fwd = {"Q": q, "K": k, "V": v, "O": out, "CAUSAL": True, "sm_scale": scale}
    assert checked_tuning.check_forward(fwd)["out"] < REL_L2_LIMIT
    assert checked_tuning.check_forward({**fwd, "O": out.flip(1)})["out"] > REL_L2_LIMIT
    assert checked_tuning.check_forward({**fwd, "O": out * 1.5})["out"] > REL_L2_LIMIT

    dq, dk, dv = attention_backward(dout, q, k, v, out, lse, True, sm_scale=scale)
    bwd = {
        "Q": q,
        "K": k,
        "V": v,
        "DO": dout,
        "CAUSAL": True,
        "sm_scale": scale,
        "DK": dk,
        "DV": dv,
        "DQ": dq,
    }
    own = DQ_OWN_KERNEL.value
    errors = checked_tuning.check_dkdv({**bwd, "DQ_ACCUMULATE": own}, own)
    assert set(errors) == {"dk", "dv"} and max(errors.values()) < REL_L2_LIMIT
    assert checked_tuning.check_dq(bwd)["dq"] < REL_L2_LIMIT
    assert checked_tuning.check_dq({**bwd, "DQ": -dq})["dq"] > REL_L2_LIMIT
    assert checked_tuning.check_dkdv({**bwd, "DV": dk, "DQ_ACCUMULATE": own}, own)["dv"] > REL_L2_LIMIT
    # an atomic mode accumulates dQ in the dK/dV kernel, into an fp32 buffer padded to a power of two
    acc = torch.zeros(1, heads, 64, 32)
    acc[..., :16] = dq.float()
    atomic = {**bwd, "DQ_ACCUMULATE": DQ_ATOMIC_ADD.value, "DQ_ACC": acc}
    assert checked_tuning.check_dkdv(atomic, own)["dq"] < REL_L2_LIMIT
    acc.zero_()
    assert checked_tuning.check_dkdv(atomic, own)["dq"] > REL_L2_LIMIT


def test_new_data_at_the_same_address_gets_its_own_reference():
    """A sweep frees one problem's tensors and allocates the next one's, often at the same address with
    the same shape: the reference is keyed by a sample of the values too, never by the address alone."""
    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    first = checked_tuning.reference_output(q, k, v, False, 0.25).clone()
    q.mul_(-1.0)  # same address, shape and dtype; other values
    second = checked_tuning.reference_output(q, k, v, False, 0.25)
    assert not torch.allclose(first, second)
    torch.testing.assert_close(
        second, torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.25), rtol=1e-5, atol=1e-5
    )


def test_references_are_released_after_a_launch(monkeypatch):
    """A tuned launch computes references (up to gigabytes at long contexts); attention_forward and
    attention_backward drop them once the launch returned, so the next row's memory is its own."""
    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    checked_tuning.reference_output(q, k, v, False, 0.25)
    assert checked_tuning._REFERENCES
    attention_forward(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert not checked_tuning._REFERENCES
    checked_tuning.reference_output(q, k, v, False, 0.25)
    out, lse = attention_forward(q.bfloat16(), k.bfloat16(), v.bfloat16())
    checked_tuning.reference_output(q, k, v, False, 0.25)
    attention_backward(out, q.bfloat16(), k.bfloat16(), v.bfloat16(), out, lse)
    assert not checked_tuning._REFERENCES


def test_when_every_tile_is_wrong_the_launch_fails_and_nothing_wrong_is_kept():
    """All candidates wrong: Triton would keep the first (every time inf) and run it silently; the launch
    raises instead, naming them, and the autotuner forgets its pick so that no later call runs it."""
    from attnbench.kernels.flash_attention2.launch import _tuned_launch

    tuning = CheckedTuning("copy", _copy_check, lambda call, q: [1.0] * len(q))
    tuned = _copy_tuned(tuning, [3.0, 2.0])
    x = torch.randn(100)
    y = torch.empty_like(x)
    with pytest.raises(RuntimeError, match="every candidate tile computed a wrong result"):
        _tuned_launch(
            tuned, tuning, lambda: tuned[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, y, 100, BLOCK=64)
        )
    assert len(tuning.rejected) == 2 and tuned.cache == {}


def test_a_reference_that_cannot_run_leaves_the_tile_timed_but_unchecked():
    def check(nargs):
        raise torch.OutOfMemoryError("CUDA out of memory (the reference)")

    tuning = CheckedTuning("k", check, lambda call, q: [0.5] * 3)
    result = tuning.do_bench(lambda: tuning.post_hook({"BLOCK_M": 64, "PERSISTENT": 2}), (0.5, 0.2, 0.8))
    assert result == [0.5] * 3 and tuning.rejected == []
    assert tuning.unchecked == [
        "k BLOCK_M=64 PERSISTENT=2: OutOfMemoryError: CUDA out of memory (the reference)"
    ]


def test_the_fingerprint_samples_a_strided_view_without_copying_the_tensor(monkeypatch):
    """A [B, S, H, D] tensor viewed as [B, H, S, D] is not contiguous: reshape(-1) would copy all of it."""
    bshd = torch.randn(1, 256, 4, 16).transpose(1, 2)
    copies = []
    real = torch.Tensor.reshape
    monkeypatch.setattr(torch.Tensor, "reshape", lambda self, *a: copies.append(a) or real(self, *a))
    first = checked_tuning._fingerprint(bshd)
    assert copies == []
    bshd[:, :, ::4].mul_(2.0)  # changes sampled rows (every 4th of 256: the sample takes every 4th)
    assert checked_tuning._fingerprint(bshd)[3] != first[3]
