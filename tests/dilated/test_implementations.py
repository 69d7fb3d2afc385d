"""Every single-process implementation against the definition (float64, autograd), on CPU.

reference.reference_attention is the definition (per-branch masked softmax, LSE merge); the others must
agree with it on out, lse, dq, dk, dv: union with log-multiplicities, the chunked union, the gather
path (math kernel, and a bshd kernel to exercise the layout FA3/xFormers use), FlexAttention (eager:
forward; its mods through a dense autograd check for the gradients, since eager Flex has no CPU backward).
"""

import math
import warnings

import pytest
import torch

from attnbench.bench.correctness import compare
from attnbench.cp.local import MathKernel
from attnbench.dilated import dilated_attention, flex, gathered, kernels, pattern, reference

PAPER_SMALL = pattern.scaled(pattern.PAPER_BRANCHES, 256)  # w = 8 ... 128, r = 1 ... 12
CONFIGS = {
    "paper/256": (PAPER_SMALL, 128, 13),  # r = 6 does not divide w = 64; 13 heads > 12 offsets
    "few-heads": (PAPER_SMALL, 128, 3),  # offsets 3 ... 11 of r = 12 have no head
    "no-r1": ([(16, 2), (64, 3), (128, 5)], 128, 4),  # rows no branch keeps: out 0, lse -inf
    "one-branch": ([(32, 4)], 64, 5),
}
EXACT = 1e-10


def inputs(seq, heads, dtype=torch.float64, batch=2, dim=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, heads, seq, dim, generator=gen, dtype=torch.float64).to(dtype) for _ in range(4)
    ]


def run(fn, q, k, v, dout):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = fn(*leaves)
    return (out.detach(), lse.detach(), *torch.autograd.grad(out, leaves, dout.to(out.dtype)))


def assert_close(ours, theirs, tol=EXACT, names=("out", "lse", "dq", "dk", "dv")):
    for name, a, b in zip(names, ours, theirs):
        a, b = a.to(torch.float64), b.to(torch.float64)
        finite = torch.isfinite(b)
        assert torch.equal(torch.isfinite(a), finite), f"{name}: -inf rows differ"
        assert torch.equal(a[~finite], b[~finite]), f"{name}: infinities differ"
        err = (a[finite] - b[finite]).abs().max().item() / max(1.0, b[finite].abs().max().item())
        assert err <= tol, f"{name}: {err:.3g} > {tol:g}"


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request):
    branches, seq, heads = CONFIGS[request.param]
    q, k, v, dout = inputs(seq, heads)
    results = {}
    for causal in (True, False):
        results[causal] = reference.reference_grads(q, k, v, dout, branches, causal=causal)
    return request.param, branches, (q, k, v, dout), results


@pytest.mark.parametrize("causal", [True, False])
def test_union_with_multiplicities_equals_the_definition(case, causal):
    _, branches, (q, k, v, dout), ref = case
    ours = run(lambda *t: reference.union_attention(*t, branches, causal=causal), q, k, v, dout)
    assert_close(ours, ref[causal])


@pytest.mark.parametrize("causal", [True, False])
def test_chunked_reference_equals_the_definition(case, causal, monkeypatch):
    _, branches, (q, k, v, dout), ref = case
    monkeypatch.setattr(reference, "CHUNK_ELEMENTS", 3000)  # several query chunks
    assert_close(reference.chunked_reference(q, k, v, dout, branches, causal=causal), ref[causal])


@pytest.mark.parametrize("causal", [True, False])
def test_gather_with_the_math_kernel_equals_the_definition(case, causal):
    _, branches, (q, k, v, dout), ref = case
    ours = run(lambda *t: dilated_attention(*t, branches, causal=causal, backend="math"), q, k, v, dout)
    assert_close(ours, ref[causal])


class BshdMath(kernels.BranchKernel):
    """The math kernel behind a [batch, seq, heads, dim] interface: FA3's and xFormers' layout."""

    name, layout, needs_cuda = "bshd_math", "bshd", False
    math = MathKernel()

    def forward(self, q, k, v, *, causal, scale):
        out, lse = self.math.forward(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal, scale=scale)
        return out.transpose(1, 2).contiguous(), lse

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        t = [x.transpose(1, 2) for x in (dout, q, k, v, out)]
        return tuple(
            g.transpose(1, 2).contiguous() for g in self.math.backward(*t, lse, causal=causal, scale=scale)
        )


@pytest.mark.parametrize("causal", [True, False])
def test_gather_in_bshd_layout_equals_the_definition(case, causal):
    _, branches, (q, k, v, dout), ref = case
    ours = run(
        lambda *t: gathered.gathered_attention(*t, branches, causal=causal, backend=BshdMath()), q, k, v, dout
    )
    assert_close(ours, ref[causal])


@pytest.mark.parametrize("causal", [True, False])
def test_gather_bf16_inputs_within_the_bf16_tolerance(causal):
    branches, seq, heads = CONFIGS["paper/256"]
    q, k, v, dout = inputs(seq, heads, torch.bfloat16)
    ref = reference.reference_grads(q, k, v, dout, branches, causal=causal)
    ours = run(lambda *t: dilated_attention(*t, branches, causal=causal, backend="math"), q, k, v, dout)
    assert ours[0].dtype == torch.bfloat16 and ours[1].dtype == torch.float32
    for i, name in ((0, "out"), (2, "dq"), (3, "dk"), (4, "dv")):
        result = compare(ours[i], ref[i], "bfloat16", grad=i > 0, what=name)
        assert result.ok, result.reason


@pytest.mark.parametrize("causal", [True, False])
def test_flex_forward_equals_the_definition(case, causal):
    _, branches, (q, k, v, _), ref = case
    out, lse = flex.flex_attention_dilated(q, k, v, branches, causal=causal)
    assert_close((out, lse), ref[causal][:2], names=("out", "lse"))


def test_flex_mods_give_the_definition_and_its_gradients():
    """Eager Flex has no CPU backward: apply its mask_mod and score_mod densely, differentiate that."""
    branches, seq, heads = CONFIGS["paper/256"]
    q, k, v, dout = inputs(seq, heads)
    for causal in (True, False):
        mask_mod, score_mod = flex.mods(branches, causal)
        head, qi, ki = pattern.grid(seq, heads)

        def dense(q, k, v, mask_mod=mask_mod, score_mod=score_mod, idx=(head, qi, ki)):
            scores = score_mod(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), 0, *idx)
            scores = scores.masked_fill(~mask_mod(0, *idx), -math.inf)
            lse = torch.logsumexp(scores, -1)
            return torch.exp(scores - lse.unsqueeze(-1)) @ v, lse

        ref = reference.reference_grads(q, k, v, dout, branches, causal=causal)
        assert_close(run(dense, q, k, v, dout), ref)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block", [8, 16])
def test_flex_block_mask_lists_every_nonempty_block_and_only_truly_full_ones(causal, block):
    branches, seq, heads = [(32, 1), (64, 2), (128, 4)], 128, 5
    mine = flex.build_block_mask(branches, seq, causal, block)
    head, qi, ki = pattern.grid(seq, heads)
    allowed = flex.mods(branches, causal)[0](0, head, qi, ki).expand(heads, seq, seq)
    n = seq // block
    tiles = allowed.view(heads, n, block, n, block)
    nonempty, full = tiles.any(dim=(2, 4)).any(0), tiles.all(dim=(2, 4)).all(0)
    listed = mine.to_dense()[0, 0].bool()
    mine_full = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(int(mine.full_kv_num_blocks[0, 0, i])):
            mine_full[i, mine.full_kv_indices[0, 0, i, j]] = True
    assert bool((listed | ~nonempty).all()), "a block with allowed pairs is not listed"
    assert bool((full | ~mine_full).all()), "a block marked full has masked pairs"
    assert mine_full.sum() > 0  # the full-block path is exercised
    partial = mine.kv_num_blocks[0, 0]
    assert bool((partial + mine.full_kv_num_blocks[0, 0] == listed.sum(-1)).all())  # disjoint lists


def test_backends_that_cannot_run_here_say_why():
    q = torch.randn(1, 2, 64, 8, dtype=torch.bfloat16)
    for name in ("sdpa_flash", "cudnn", "sdpa_efficient", "fa3", "xformers"):
        reason = kernels.get(name).unavailable(q.device, q.dtype, 8)
        assert reason and "CUDA" in reason, (name, reason)
        with pytest.raises(RuntimeError, match=f"backend {name}: needs CUDA"):
            dilated_attention(q, q, q, [(32, 2)], causal=True, backend=name)
    assert kernels.get("math").unavailable(q.device, q.dtype, 8) is None


def test_bad_inputs_are_clear_errors():
    q = torch.randn(1, 2, 48, 8)
    with pytest.raises(ValueError, match="sequence length 48 is not a multiple of segment length 32"):
        dilated_attention(q, q, q, [(32, 2)], causal=True)
    with pytest.raises(ValueError, match="one shape"):
        dilated_attention(q, q[:, :1], q, [(16, 2)], causal=True)
    with pytest.raises(ValueError, match="unknown implementation 'sparse'"):
        dilated_attention(q, q, q, [(16, 2)], causal=True, implementation="sparse")
    with pytest.raises(ValueError, match="unknown dilated-attention backend 'fa9'"):
        dilated_attention(q, q, q, [(16, 2)], causal=True, backend="fa9")


def test_fully_masked_rows_never_give_nan_in_the_reference_gradients():
    branches, seq, heads = CONFIGS["no-r1"]
    q, k, v, dout = inputs(seq, heads)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, lse, *grads = reference.reference_grads(q, k, v, dout, branches, causal=True)
    assert torch.isinf(lse).any() and all(torch.isfinite(g).all() for g in grads)
    assert (out[torch.isinf(lse)] == 0).all()
