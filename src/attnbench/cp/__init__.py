"""Context-parallel attention on torch.distributed (NCCL on GPU, gloo on CPU).

Every strategy has one signature:
    out, lse = attention(q, k, v, strategy="zigzag", causal=True, group=None, kernel=None, **options)
q, k, v: this rank's shard, [batch, heads, seq_local, head_dim], in the strategy's layout
(`layout_for(...).shard(x_global, rank)`). out: same shape and dtype, differentiable in q, k, v.
lse: [batch, heads, seq_local] float32 (natural log), not differentiable; None for torch_cp.
kernel: "cpu_math" | "sdpa_flash" | "cudnn" (None: cudnn on CUDA, cpu_math on CPU).
Peers from other libraries sit beside ours behind the same signature: Transformer Engine's
(te_p2p, te_a2a, te_all_gather; te_cp.py) and MagiAttention's (magi; magi_cp.py); where the library is
not installed their `unavailable` names what to install.
A new strategy is one file (its function, and `defaults(world, heads, given)` if it has options with
defaults) plus one entry in STRATEGIES.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnbench.cp import burst as _burst
from attnbench.cp import double_ring as _double_ring
from attnbench.cp import magi_cp as _magi
from attnbench.cp import te_cp as _te
from attnbench.cp import torch_cp as _torch_cp
from attnbench.cp import usp as _usp
from attnbench.cp.allgather import allgather_attention
from attnbench.cp.burst import burst_attention
from attnbench.cp.double_ring import double_ring_attention
from attnbench.cp.layout import Layout
from attnbench.cp.local import KERNELS, get_kernel
from attnbench.cp.ring import ring_attention
from attnbench.cp.ulysses import ulysses_attention
from attnbench.cp.usp import default_degrees, usp_attention
from attnbench.cp.zigzag import zigzag_attention


def _always(device, kernel) -> str | None:
    return None


def _no_defaults(world: int, heads: int, given: dict) -> dict:
    return {}


@dataclass(frozen=True)
class Strategy:
    name: str
    fn: Callable
    layout_kind: str  # contiguous | zigzag | usp
    summary: str
    options: tuple[str, ...] = ()
    returns_lse: bool = True
    unavailable: Callable = _always  # (device, kernel) -> reason or None
    rehearsable: bool = True  # its communication goes through comm.py (bench.py's OOM rehearsal)
    # (world, heads, options given) -> the options it fills in; declared in the strategy's own file
    defaults: Callable[[int, int, dict], dict] = _no_defaults

    def resolved_options(self, world: int, heads: int, given: dict) -> dict:
        """The options this strategy will actually use at this world size: `given`, defaults filled in."""
        return {**given, **self.defaults(world, heads, given)}

    def layout(self, world: int, heads: int | None = None, **options) -> Layout:
        if self.layout_kind != "usp":
            return Layout.named(self.layout_kind, world)
        degree = options.get("ulysses_degree")
        if degree is None and options.get("ring_degree"):
            degree = world // options["ring_degree"]
        if degree is None:
            if heads is None:
                raise ValueError("usp layout: give ulysses_degree (or heads to pick the default)")
            degree = default_degrees(world, heads)[0]
        return Layout.named("usp", world, degree)


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("ring", ring_attention, "contiguous", "ring, P2P K/V rotation, contiguous layout"),
        Strategy("zigzag", zigzag_attention, "zigzag", "zigzag ring, causal-balanced"),
        Strategy("ulysses", ulysses_attention, "contiguous", "all-to-all heads <-> sequence"),
        Strategy(
            "usp",
            usp_attention,
            "usp",
            "Ulysses inside groups x zigzag ring across",
            options=("ulysses_degree", "ring_degree"),
            defaults=_usp.defaults,
        ),
        Strategy(
            "double_ring",
            double_ring_attention,
            "zigzag",
            "LoongTrain inner/outer ring",
            options=("window",),
            defaults=_double_ring.defaults,
        ),
        Strategy(
            "burst",
            burst_attention,
            "zigzag",
            "double ring; backward circulates Q, dO, LSE, delta",
            options=("window",),
            defaults=_burst.defaults,
        ),
        Strategy("allgather", allgather_attention, "zigzag", "Llama 3 all-gather K/V, reduce-scatter dK/dV"),
        Strategy(
            "torch_cp",
            _torch_cp.torch_cp_attention,
            "zigzag",
            "PyTorch context_parallel (ring SDPA)",
            options=("rotate_method",),
            returns_lse=False,
            unavailable=_torch_cp.unavailable,
            rehearsable=False,
        ),
        # peers: their communication is inside the library (no rehearsal); no LSE; not installed -> a reason
        *(
            Strategy(
                f"te_{kind}",
                _te.strategy_fn(kind),
                "zigzag",
                f"Transformer Engine's context parallelism, cp_comm_type {kind}",
                returns_lse=False,
                unavailable=_te.unavailable,
                rehearsable=False,
            )
            for kind in _te.COMM_TYPES
        ),
        Strategy(
            "magi",
            _magi.magi_attention,
            "contiguous",
            "MagiAttention's distributed attention (its dispatch asked for one contiguous chunk per rank)",
            returns_lse=False,
            unavailable=_magi.unavailable,
            rehearsable=False,
        ),
    )
}


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown context-parallel strategy {name!r}; choose one of {sorted(STRATEGIES)}")
    return STRATEGIES[name]


def resolved_options(strategy: str, world: int, heads: int, given: dict) -> dict:
    """The options `strategy` will use at this world size and head count, its defaults filled in."""
    return get_strategy(strategy).resolved_options(world, heads, given)


def layout_for(strategy: str, world: int, heads: int | None = None, **options) -> Layout:
    """The sequence layout `strategy` expects at this world size (and options)."""
    return get_strategy(strategy).layout(world, heads, **options)


def attention(
    q,
    k,
    v,
    *,
    strategy: str,
    causal: bool = False,
    group=None,
    kernel=None,
    scale=None,
    check_ranks: bool = True,
    **options,
):
    """Context-parallel attention with the named strategy. Returns (out, lse)."""
    spec = get_strategy(strategy)
    unknown = set(options) - set(spec.options)
    if unknown:
        raise ValueError(f"{strategy}: unknown options {sorted(unknown)}; it takes {list(spec.options)}")
    return spec.fn(
        q, k, v, causal=causal, group=group, kernel=kernel, scale=scale, check_ranks=check_ranks, **options
    )


__all__ = [
    "KERNELS",
    "STRATEGIES",
    "Layout",
    "Strategy",
    "attention",
    "get_kernel",
    "get_strategy",
    "layout_for",
    "resolved_options",
]
