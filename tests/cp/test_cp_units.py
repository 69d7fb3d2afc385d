"""Single-process pieces of attnbench.cp: layouts, block plans, LSE merge, the math kernel, the burst
surrogate output, the registry. No process group needed."""

import itertools

import pytest
import torch

from attnbench import cp
from attnbench.cp.blocks import contiguous_plan, zigzag_plan
from attnbench.cp.layout import Layout
from attnbench.cp.local import MathKernel, get_kernel
from attnbench.cp.merge import LseAccumulator, rowdot, surrogate_out_


def dense(q, k, v, causal):
    logits = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        n = logits.shape[-1]
        logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(logits, -1) @ v, torch.logsumexp(logits, -1)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_zigzag_and_usp_indices():
    zig = Layout.named("zigzag", 2)
    assert zig.indices(8, 0).tolist() == [0, 1, 6, 7]
    assert zig.indices(8, 1).tolist() == [2, 3, 4, 5]
    assert Layout.named("contiguous", 4).indices(8, 2).tolist() == [4, 5]
    usp = Layout.named("usp", 4, ulysses_degree=2)  # ring index 0: chunks 0 and 3 of 4, split in two
    assert [usp.indices(16, r).tolist() for r in range(4)] == [
        [0, 1, 2, 3],
        [12, 13, 14, 15],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
    ]


@pytest.mark.parametrize(
    "kind,world,degree", [("contiguous", 3, None), ("zigzag", 4, None), ("usp", 8, 2), ("usp", 8, 4)]
)
def test_shard_unshard_round_trip(kind, world, degree):
    layout = Layout.named(kind, world, degree)
    x = randn(1, 2, 48, 3)
    shards = [layout.shard(x, r) for r in range(world)]
    assert sorted(torch.cat([layout.indices(48, r) for r in range(world)]).tolist()) == list(range(48))
    assert torch.equal(layout.unshard(shards), x)


def test_layout_rejects_indivisible_lengths():
    with pytest.raises(ValueError, match="divisible by 8"):
        Layout.named("zigzag", 4).indices(20, 0)
    with pytest.raises(ValueError, match="must divide"):
        Layout.named("usp", 4, ulysses_degree=3)


@pytest.mark.parametrize("plan_fn,kind", [(contiguous_plan, "contiguous"), (zigzag_plan, "zigzag")])
@pytest.mark.parametrize("causal", [True, False])
def test_block_plans_cover_the_mask_exactly_once(plan_fn, kind, causal):
    world, seq = 4, 32
    layout = Layout.named(kind, world)
    local = seq // world
    covered = torch.zeros(seq, seq, dtype=torch.int64)
    for q_pos, kv_pos in itertools.product(range(world), repeat=2):
        q_idx, k_idx = layout.indices(seq, q_pos), layout.indices(seq, kv_pos)
        for rows, keys, block_causal in plan_fn(causal, local)(q_pos, kv_pos):
            qi, ki = q_idx[rows], k_idx[keys]
            block = torch.ones(len(qi), len(ki), dtype=torch.int64)
            if block_causal:
                block = block.tril()
            covered[qi.unsqueeze(1), ki.unsqueeze(0)] += block
    expected = torch.ones(seq, seq, dtype=torch.int64)
    assert torch.equal(covered, expected.tril() if causal else expected)


def test_zigzag_plan_balances_causal_work():
    world, local = 4, 8
    plan = zigzag_plan(True, local)
    for q_pos, kv_pos in itertools.product(range(world), repeat=2):
        if q_pos != kv_pos:
            ((rows, keys, _),) = plan(q_pos, kv_pos)
            assert len(range(local)[rows]) * len(range(local)[keys]) == local * local // 2


@pytest.mark.parametrize("causal", [True, False])
def test_math_kernel_matches_dense_attention_and_its_gradients(causal):
    q, k, v, dout = (randn(2, 3, 12, 8, seed=s) for s in range(4))
    out, lse = MathKernel().forward(q, k, v, causal=causal, scale=8**-0.5)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = dense(*leaves, causal)
    ref_out.backward(dout)
    torch.testing.assert_close(out, ref_out.detach())
    torch.testing.assert_close(lse, ref_lse.detach())
    grads = MathKernel().backward(dout, q, k, v, out, lse, causal=causal, scale=8**-0.5)
    for got, leaf in zip(grads, leaves):
        torch.testing.assert_close(got, leaf.grad)


def test_merge_of_key_blocks_equals_attention_over_all_keys_and_backward_splits():
    q, k, v, dout = (randn(1, 2, 6, 4, seed=s) for s in range(4))
    kernel, scale = MathKernel(), 4**-0.5
    acc = LseAccumulator(q)
    for keys in (slice(0, 2), slice(2, 6)):
        acc.add(slice(None), *kernel.forward(q, k[:, :, keys], v[:, :, keys], causal=False, scale=scale))
    out, lse = acc.result()
    ref_out, ref_lse = dense(q, k, v, False)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(lse, ref_lse)
    # With the global out and LSE, per-block backward pieces sum to the full gradient.
    full = kernel.backward(dout, q, k, v, out, lse, causal=False, scale=scale)
    parts = [
        kernel.backward(dout, q, k[:, :, s], v[:, :, s], out, lse, causal=False, scale=scale)
        for s in (slice(0, 2), slice(2, 6))
    ]
    torch.testing.assert_close(parts[0][0] + parts[1][0], full[0])
    torch.testing.assert_close(torch.cat([parts[0][1], parts[1][1]], dim=2), full[1])


def test_surrogate_out_has_the_same_row_sums_and_gives_the_same_gradients():
    q, k, v, dout = (randn(1, 2, 6, 4, seed=s) for s in range(4))
    dout[0, 0, 3] = 0.0  # a row with no gradient
    kernel = MathKernel()
    out, lse = kernel.forward(q, k, v, causal=True, scale=0.5)
    delta = rowdot(dout, out)
    surrogate = surrogate_out_(torch.empty_like(out), dout, delta)
    torch.testing.assert_close(rowdot(dout, surrogate), delta)
    assert torch.all(surrogate[0, 0, 3] == 0)
    for a, b in zip(
        kernel.backward(dout, q, k, v, surrogate, lse, causal=True, scale=0.5),
        kernel.backward(dout, q, k, v, out, lse, causal=True, scale=0.5),
    ):
        torch.testing.assert_close(a, b)


def test_causal_blocks_must_be_square():
    x = randn(1, 1, 4, 2)
    with pytest.raises(ValueError, match="square"):
        MathKernel().forward(x, x[:, :, :2], x[:, :, :2], causal=True, scale=1.0)


def test_registry_kernels_and_unavailable_reasons():
    assert set(cp.STRATEGIES) == {
        "ring",
        "zigzag",
        "ulysses",
        "usp",
        "double_ring",
        "burst",
        "allgather",
        "torch_cp",
        "te_p2p",
        "te_a2a",
        "te_all_gather",
        "magi",
    }
    assert cp.layout_for("ulysses", 4).kind == "contiguous"
    assert cp.layout_for("burst", 4).kind == "zigzag"
    assert cp.layout_for("usp", 8, ulysses_degree=2).ring_degree == 4
    assert get_kernel(None, torch.device("cpu")).name == "cpu_math"
    for name in ("sdpa_flash", "cudnn"):
        assert "CUDA" in get_kernel(name).unavailable(torch.device("cpu"), torch.bfloat16, 64)
    assert "CUDA" in cp.get_strategy("torch_cp").unavailable(torch.device("cpu"), None)
    with pytest.raises(ValueError, match="unknown context-parallel strategy"):
        cp.get_strategy("nope")


def test_verdict_names_a_nan_error_on_one_rank_as_failed():
    from attnbench.studies.context_parallel.verify import LSE_TOLERANCE, combine_verdicts

    good = {m: {"cp": 1e-4, "single": 1e-4, "bound": 1e-3} for m in ("out", "dq", "dk", "dv")}
    nan_dk = {**good, "dk": {"cp": float("nan"), "single": 1e-4, "bound": 1e-3}}
    for verdicts in (
        [(True, good, 1e-5), (False, nan_dk, 1e-5)],
        [(False, nan_dk, 1e-5), (True, good, 1e-5)],
    ):
        combined = combine_verdicts(verdicts)
        assert combined["ok"] is False and combined["status"] == "incorrect"
        assert combined["reason"] == "beyond tolerance: dk"
        assert combined["errors"]["dk"]["cp"] != combined["errors"]["dk"]["cp"]  # the NaN is reported
    nan_lse = combine_verdicts([(True, good, 1e-5), (False, good, float("nan"))])
    assert nan_lse["reason"] == "beyond tolerance: lse" and nan_lse["lse_err"] != nan_lse["lse_err"]
    fine = combine_verdicts([(True, good, 1e-5), (True, good, 2e-5)])
    per_rank = [{**good, "lse": {"cp": lse, "bound": LSE_TOLERANCE}} for lse in (1e-5, 2e-5)]
    assert fine == {"errors": good, "rank_errors": per_rank, "lse_err": 2e-5, "ok": True, "status": "ok",
                    "reason": ""}  # fmt: skip
    # the rank that failed only on its LSE is the one whose own entry says so
    assert [r["lse"]["cp"] != r["lse"]["cp"] for r in nan_lse["rank_errors"]] == [False, True]


def test_verdict_keeps_every_ranks_errors_beside_the_worst():
    # The worst of each metric may come from different ranks: on 2x H100 MagiAttention's row showed a
    # single-GPU dq error 80x the one ring's row showed for the same tensors and layout, and the combined
    # errors could not tell whether another rank or a changed tensor gave it.
    from attnbench.rows import CpCheckRow
    from attnbench.studies.context_parallel.verify import combine_verdicts

    rank0 = {m: {"cp": 1e-4, "single": 2e-4, "bound": 1e-3} for m in ("out", "dq", "dk", "dv")}
    rank1 = {**rank0, "dq": {"cp": 9.9, "single": 1.5e-2, "bound": 5e-2}}
    combined = combine_verdicts([(True, rank0, None), (False, rank1, None)])
    assert combined["errors"]["dq"]["single"] == 1.5e-2 and combined["errors"]["out"]["single"] == 2e-4
    assert combined["rank_errors"] == [rank0, rank1]
    row = CpCheckRow.from_dict({"strategy": "magi", "kernel": "cudnn", "mask": "causal", "seq_len": 16,
                                "heads": 4, "head_dim": 8, "dtype": "bfloat16", "world_size": 2, **combined})  # fmt: skip
    assert row.rank_errors[1]["dq"]["cp"] == 9.9 and "rank_errors" in row.to_dict()
    older = CpCheckRow.from_dict({k: v for k, v in row.to_dict().items() if k != "rank_errors"})
    assert older.rank_errors is None and "rank_errors" not in older.to_dict()  # older results still read


@pytest.mark.parametrize("name", sorted(cp.STRATEGIES))
def test_each_strategys_defaults_fill_only_its_own_options_and_never_override_a_given_one(name, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # 8 ranks on two nodes of 4 GPUs
    strategy = cp.get_strategy(name)
    filled = strategy.resolved_options(8, 16, {})
    assert set(filled) <= set(strategy.options), f"{name} fills options it does not take: {filled}"
    for option, value in filled.items():  # a value the caller gives wins over the default
        assert strategy.resolved_options(8, 16, {option: value + 1})[option] == value + 1


def test_the_window_is_the_gpus_per_node_and_usp_takes_the_largest_ulysses_degree_that_fits(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert cp.resolved_options("double_ring", 8, 16, {}) == {"window": 4}
    assert cp.resolved_options("burst", 8, 16, {}) == {"window": 4}
    assert cp.resolved_options("usp", 8, 16, {}) == {"ulysses_degree": 4, "ring_degree": 2}
    assert cp.resolved_options("usp", 8, 2, {}) == {"ulysses_degree": 2, "ring_degree": 4}  # 2 heads
    assert cp.resolved_options("usp", 8, 16, {"ring_degree": 8}) == {"ring_degree": 8}  # the other follows
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")  # does not divide the world: one ring window of all ranks
    assert cp.resolved_options("double_ring", 8, 16, {}) == {"window": 8}


@pytest.mark.parametrize("name", ["te_p2p", "te_a2a", "te_all_gather", "magi"])
def test_peer_strategies_not_installed_name_what_to_install(name, monkeypatch):
    import importlib.util

    spec = cp.get_strategy(name)
    assert not spec.rehearsable and not spec.returns_lse  # communication inside the library, no LSE
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda mod, *a: None if mod.split(".")[0] in PEER_MODULES else real(mod, *a),
    )
    reason = spec.unavailable(torch.device("cuda"), None)  # not installed: said before any device question
    want = (
        "pip install --no-build-isolation transformer_engine[pytorch]"
        if name.startswith("te_")
        else ("github.com/SandAI-org/MagiAttention")
    )
    assert reason and "not installed" in reason and want in reason, reason
    with pytest.raises(
        RuntimeError, match="not installed"
    ):  # called anyway: the same reason, no crash inside
        x = torch.zeros(1, 2, 4, 8)
        spec.fn(x, x, x, causal=True)


PEER_MODULES = {"transformer_engine", "magi_attention"}


def test_peer_strategy_rows_are_unavailable_with_the_reason_in_measure_precheck():
    from attnbench.studies.context_parallel.measure import precheck

    for name in ("te_p2p", "magi"):
        refused = precheck(
            cp.get_strategy(name), mask="causal", seq_len=64, world=2, device=torch.device("cpu"), kernel=None
        )
        assert refused is not None and refused[0] == "unavailable", refused


def test_magi_output_hands_the_library_a_contiguous_gradient():
    """MagiAttention's FFA backward assumes dO's head stride is head_dim (it checks only the last stride):
    our [1, heads, seq, dim] view of its [seq, heads, dim] output must send the gradient back contiguous,
    or every head past the first gets wrong gradients. A stand-in for the library's op records what its
    backward receives; without to_ours' wrapper it receives the transposed, non-contiguous view."""
    from attnbench.cp.magi_cp import to_ours

    seen = {}

    class LibraryOp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            seen["contiguous"], seen["strides"] = grad.is_contiguous(), grad.stride()
            return grad

    seq, heads, dim = 8, 3, 4
    x = torch.randn(seq, heads, dim, requires_grad=True)
    dout = torch.randn(1, heads, seq, dim)  # contiguous in our layout, as the checks pass it

    LibraryOp.apply(x).transpose(0, 1).unsqueeze(0).backward(dout)  # the call before the fix
    assert seen["contiguous"] is False and seen["strides"] == (dim, seq * dim, 1)

    x.grad = None
    out = to_ours(LibraryOp.apply(x))
    assert out.shape == (1, heads, seq, dim)
    out.backward(dout)
    assert seen["contiguous"] is True and seen["strides"] == (heads * dim, dim, 1)
    torch.testing.assert_close(x.grad, dout[0].transpose(0, 1))  # the identity: the gradient is unchanged
