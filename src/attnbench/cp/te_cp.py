"""Transformer Engine's own context-parallel attention (`DotProductAttention` with a `cp_group`), as
strategies beside ours: `te_p2p` (KV ring, P2P), `te_a2a` (Ulysses-style all-to-all of heads),
`te_all_gather` (all-gather K/V), one per `cp_comm_type`.

Layout: TE's load balancing (CPLoadBalancingStrategy.DUAL_CHUNK_SWAP, the default) gives rank r the
chunks r and 2P-1-r of 2P: our zigzag layout, so the shards are interchangeable with `zigzag`.
TE takes [batch, seq, heads, dim] (qkv_format "bshd") and returns [batch, seq, heads * dim]; the
transposes to and from our [batch, heads, seq, dim] are two copies inside the call (small beside
the attention). TE picks its own local backend (flash or fused/cuDNN; NVTE_FLASH_ATTN, NVTE_FUSED_ATTN)
and returns no LSE (None). At world size 1 TE runs no context-parallel code (cp_group None: plain
DotProductAttention): such a row is TE's single-GPU attention, and says world 1.

Needs a CUDA GPU and `pip install --no-build-isolation transformer_engine[pytorch]` (our air-gapped
GPU machine: scripts/carry/); without it every row says so. The module is cached per shape, mask,
group and comm type (TE caches its backend choice per module).
"""

from __future__ import annotations

import functools
import importlib.util

import torch
import torch.distributed as dist

from attnbench.cp import comm

COMM_TYPES = ("p2p", "a2a", "all_gather")
INSTALL = (
    "pip install --no-build-isolation transformer_engine[pytorch] (on a CUDA machine with network; "
    "our air-gapped GPU machine: scripts/carry/)"
)
_MODULES: dict = {}


def unavailable(device: torch.device | str, kernel: str | None = None) -> str | None:
    """Why TE's context parallelism cannot run here, or None."""
    if importlib.util.find_spec("transformer_engine") is None:
        return f"Transformer Engine is not installed: {INSTALL}"
    if torch.device(device).type != "cuda":
        return "Transformer Engine's attention runs on CUDA GPUs only"
    if kernel not in (None, "cudnn"):
        return (
            f"kernel {kernel!r}: TE picks its own local backend (flash or fused/cuDNN); its rows are in "
            "the default-kernel sweep"
        )
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason, not a crash
        return f"transformer_engine.pytorch does not import ({type(exc).__name__}: {exc}); {INSTALL}"
    return None


def _module(heads: int, head_dim: int, causal: bool, scale: float | None, group, comm_type: str):
    world = comm.group_size(group)
    key = (heads, head_dim, causal, scale, id(group), world, comm_type)
    if key not in _MODULES:
        from transformer_engine.pytorch import DotProductAttention

        cp = {}
        if world > 1:
            ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
            cp = {"cp_group": group or dist.group.WORLD, "cp_global_ranks": ranks, "cp_comm_type": comm_type}
            cp["cp_stream"] = torch.cuda.Stream()
        _MODULES[key] = DotProductAttention(
            heads,
            head_dim,
            qkv_format="bshd",
            attn_mask_type="causal" if causal else "no_mask",
            softmax_scale=scale,
            **cp,
        )
    return _MODULES[key]


def te_attention(
    q, k, v, *, comm_type: str, causal=False, group=None, kernel=None, scale=None, check_ranks=True
):
    """TE's context-parallel attention on this rank's zigzag shard [batch, heads, seq_local, dim]:
    (out, None)."""
    if comm_type not in COMM_TYPES:
        raise ValueError(f"te_attention: cp_comm_type {comm_type!r}; choose one of {COMM_TYPES}")
    why = unavailable(q.device, kernel)
    if why:
        raise RuntimeError(why)
    batch, heads, seq, dim = q.shape
    world = comm.group_size(group)
    if world > 1 and seq % 2:
        raise ValueError(f"te_{comm_type}: the local sequence {seq} must be even (TE's two chunks per rank)")
    if comm_type == "a2a" and heads % world:
        raise ValueError(f"te_a2a: heads {heads} not divisible by the world size {world}")
    module = _module(heads, dim, causal, scale, group, comm_type)
    bshd = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
    out = module(*bshd)
    return out.view(batch, seq, heads, dim).transpose(1, 2), None


def strategy_fn(comm_type: str):
    """te_attention with its cp_comm_type bound (one strategy per comm type)."""
    fn = functools.partial(te_attention, comm_type=comm_type)
    fn.__name__ = f"te_{comm_type}_attention"  # type: ignore[attr-defined]
    return fn
