"""The fused dilated-attention kernel (kernels/dilated_attention) against the definition, on CPU.

Without a GPU the kernels run under the Triton interpreter (tiles 32x16 forward, 16x32 dK/dV, 32x16 dQ),
so the shapes are tiny but still cover: several blocks per segment, partial last blocks, the causal
diagonal stage, an r = 1 branch (launched last, writing the output) and none (rows no branch keeps:
out 0, lse -inf, zero gradients), w not a multiple of r, r > w (one kept row per segment), heads with
different offsets. fp32 inputs multiply in full fp32, so they must match the float64 reference to
fp32 rounding; bf16 inputs are judged with bench.correctness's tolerance and against the gather path.
"""

from __future__ import annotations

import pytest
import torch

from attnbench.bench.correctness import compare
from attnbench.dilated import dilated_attention as registry_attention
from attnbench.dilated import gathered, reference
from attnbench.kernels.dilated_attention import dilated_attention, predicted_peak_bytes
from attnbench.studies.dilated_attention import profiles, scaling

GIB = 2**30
# name: (branches, seq_len, heads)
CONFIGS = {
    "r1-several-blocks": ([(64, 1), (32, 2), (64, 4)], 64, 3),
    "no-r1-uncovered-rows": ([(16, 2), (32, 3)], 32, 2),
    "odd-r-and-r-above-w": ([(8, 1), (16, 5), (48, 12), (8, 16)], 48, 3),
}
CASES = [("r1-several-blocks", True), ("r1-several-blocks", False), ("no-r1-uncovered-rows", False),
         ("no-r1-uncovered-rows", True), ("odd-r-and-r-above-w", True)]  # fmt: skip


def inputs(seq, heads, dtype, batch=1, dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, seq, dim, generator=gen).to(dtype) for _ in range(4)]


def run(fn, q, k, v, dout):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = fn(*leaves)
    return (out.detach(), lse.detach(), *torch.autograd.grad(out, leaves, dout.to(out.dtype)))


def assert_close(ours, theirs, tol, names=("out", "lse", "dq", "dk", "dv")):
    for name, a, b in zip(names, ours, theirs):
        a, b = a.to(torch.float64), b.to(torch.float64)
        finite = torch.isfinite(b)
        assert torch.equal(torch.isfinite(a), finite), f"{name}: the rows no branch keeps differ"
        assert torch.equal(a[~finite], b[~finite]), f"{name}: infinities differ"
        err = (a[finite] - b[finite]).abs().max().item() / max(1.0, b[finite].abs().max().item())
        assert err <= tol, f"{name}: {err:.3g} > {tol:g}"


@pytest.mark.parametrize(
    ("config", "causal"), CASES, ids=[f"{c}-{'causal' if m else 'full'}" for c, m in CASES]
)
def test_fp32_matches_the_definition(config, causal):
    branches, seq, heads = CONFIGS[config]
    q, k, v, dout = inputs(seq, heads, torch.float32)
    ours = run(lambda *x: dilated_attention(*x, branches, causal=causal), q, k, v, dout)
    assert_close(ours, reference.reference_grads(q, k, v, dout, branches, causal=causal), tol=2e-6)
    if config == "no-r1-uncovered-rows":  # the case exists: some rows get nothing
        assert torch.isinf(ours[1]).any() and (ours[0][torch.isinf(ours[1])] == 0).all()


def test_the_unfilled_accumulator_is_read_only_where_a_branch_wrote(monkeypatch):
    """With an r = 1 branch the fp32 accumulator is allocated without a zero fill: filled with NaN here,
    any read of a row before a branch wrote it would show in the output."""
    real_empty = torch.empty
    poisoned = []

    def nan_empty(*shape, **kwargs):
        t = real_empty(*shape, **kwargs)
        if t.dtype == torch.float32:
            poisoned.append(t.shape)
            t.fill_(float("nan"))
        return t

    branches, seq, heads = CONFIGS["odd-r-and-r-above-w"]
    q, k, v, dout = inputs(seq, heads, torch.float32)
    monkeypatch.setattr(torch, "empty", nan_empty)
    out, lse = dilated_attention(q, k, v, branches, causal=True)
    monkeypatch.undo()
    assert tuple(q.shape) in poisoned, "the accumulator was not allocated unfilled: the test tests nothing"
    ref_out, ref_lse = reference.reference_grads(q, k, v, dout, branches, causal=True)[:2]
    assert_close((out, lse), (ref_out, ref_lse), tol=2e-6, names=("out", "lse"))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_bf16_within_tolerance_and_agrees_with_the_gather_path(causal):
    branches, seq, heads = [(16, 1), (32, 2), (64, 4)], 64, 2
    q, k, v, dout = inputs(seq, heads, torch.bfloat16, batch=2, seed=1)
    ours = run(
        lambda *x: registry_attention(*x, branches, causal=causal, implementation="fused"), q, k, v, dout
    )
    ref = reference.reference_grads(q, k, v, dout, branches, causal=causal)
    for name, got, expected in zip(("out", "lse", "dq", "dk", "dv"), ours, ref):
        if name != "lse":
            check = compare(got, expected, "bfloat16", grad=name != "out", what=name)
            assert check.ok, check.reason
    assert ours[0].dtype == torch.bfloat16 and ours[1].dtype == torch.float32
    gather = run(
        lambda *x: gathered.gathered_attention(*x, branches, causal=causal, backend="math"), q, k, v, dout
    )
    assert_close(ours, gather, tol=3e-2)  # two bf16 roundings of the same math


def test_bad_inputs_are_named():
    q = torch.randn(1, 2, 48, 16)
    with pytest.raises(ValueError, match="torch.float64"):
        dilated_attention(q.double(), q.double(), q.double(), [(16, 1)], causal=True)
    odd = torch.randn(1, 2, 48, 12)
    with pytest.raises(ValueError, match="head_dim 12 not supported"):
        dilated_attention(odd, odd, odd, [(16, 1)], causal=True)
    with pytest.raises(ValueError, match="sequence length 48 is not a multiple of segment length 32"):
        dilated_attention(q, q, q, [(16, 1), (32, 2)], causal=True)
    with pytest.raises(ValueError, match="one shape"):
        dilated_attention(q, q[:, :1], q, [(16, 1)], causal=True)
    with pytest.raises(ValueError, match=r"w=16, r=0"):
        dilated_attention(q, q, q, [(16, 0)], causal=True)
    with pytest.raises(ValueError, match="at least one branch"):
        dilated_attention(q, q, q, [], causal=True)


def test_memory_model_at_two_million_tokens():
    """The report's default shape (batch 1, 16 heads x 128, bf16) at 2M tokens: the numbers memory.py states."""
    n = 2 * 1024 * 1024
    assert predicted_peak_bytes(1, 16, n, 128, 2, backward=False) == 48 * GIB + 128 * 2**20
    assert predicted_peak_bytes(1, 16, n, 128, 2, backward=True) == 80 * GIB + 256 * 2**20
    assert predicted_peak_bytes(1, 16, n // 2, 128, 2, backward=True) * 2 == 80 * GIB + 256 * 2**20


def test_scaling_skips_a_length_the_memory_model_says_would_not_fit(monkeypatch):
    config = profiles.resolve("smoke", cuda=False)
    monkeypatch.setattr(scaling.Sweep, "free_bytes", lambda self: 1024)  # 1 KiB free: nothing fits
    sweep = scaling.Sweep(config, device="cpu")
    sweep.run(scaling.Series("dilated_fused", "dilated", "fused"), "fwd_bwd")
    assert [r.status for r in sweep.rows] == ["skipped"] * len(config["sweep"]["seq_lens"])
    assert all("predicted peak" in r.reason and "GiB free" in r.reason for r in sweep.rows)
    assert all(r.extra["flops_fwd"] > 0 for r in sweep.rows)  # the skipped rows still carry the pattern


def test_the_registry_checks_the_pattern_first():
    q = torch.randn(1, 2, 48, 16)
    with pytest.raises(ValueError, match="sequence length 48 is not a multiple of segment length 32"):
        registry_attention(q, q, q, [(32, 1)], causal=True, implementation="fused")
