"""MagiAttention's distributed attention (`magi_attention.api`: magi_attn_varlen_key, calc_attn) as a
strategy beside ours: `magi`.

MagiAttention dispatches tokens to ranks itself (its dispatch solver over chunks of `chunk_size`). Our
strategies take a shard already in their layout, so `magi` asks for the contiguous layout: one chunk
per rank (chunk_size = seq / world) and, where the library has it, the sequential dispatch algorithm,
so rank r holds tokens [r S/P, (r+1) S/P). That assumption is what the GPU correctness check verifies
against the single-GPU reference: if MagiAttention places chunks otherwise, the check says
`incorrect` and the timed rows are marked so (studies/context_parallel/checks.py).

Tensors go to MagiAttention as [seq, heads, dim] (batch 1; the transposes are copies inside the call).
The gradient of its output goes back contiguous (`_ContiguousGrad`): FFA's backward checks only that the
last stride is 1 and its main kernel assumes dO's head stride is head_dim, while the preprocess that
computes rowsum(dO * O) reads the real stride, so the transposed view autograd would hand it gave
right outputs and wrong dQ, dK, dV (head 0 exact, the other heads not; 2x H100, code 82d51d2).
It returns no LSE here (None). Needs a Hopper GPU and MagiAttention built from source (not on PyPI):
every row says so otherwise. The runtime key is cached per length, shape, mask and group.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect

import torch
import torch.distributed as dist

from attnbench.cp import comm

INSTALL = (
    "MagiAttention is not on PyPI; build it from source on a Hopper GPU machine: git clone "
    "https://github.com/SandAI-org/MagiAttention && cd MagiAttention && git submodule update --init "
    "--recursive && pip install --no-build-isolation . (our air-gapped GPU machine: scripts/carry/)"
)
_KEYS: dict = {}


def unavailable(device: torch.device | str, kernel: str | None = None) -> str | None:
    """Why MagiAttention's distributed attention cannot run here, or None."""
    if importlib.util.find_spec("magi_attention") is None:
        return f"MagiAttention is not installed: {INSTALL}"
    device = torch.device(device)
    if device.type != "cuda":
        return "MagiAttention runs on CUDA GPUs only (its FFA kernel needs Hopper, sm90)"
    if torch.cuda.get_device_capability(device)[0] != 9:
        return f"MagiAttention's FFA kernel needs a Hopper GPU (sm90); this is sm{''.join(map(str, torch.cuda.get_device_capability(device)))}"
    if kernel not in (None, "cudnn"):
        return f"kernel {kernel!r}: MagiAttention runs its own FFA kernel; its rows are in the default-kernel sweep"
    return None


def _dist_config(api):
    """DistAttnConfig with the sequential dispatch (one contiguous chunk per rank) where the library has it."""
    try:
        from magi_attention.config import DispatchConfig, DistAttnConfig
        from magi_attention.meta.solver.dispatch_solver import SequentialDispatchAlg
    except ImportError:
        return None
    return DistAttnConfig(dispatch_config=DispatchConfig(alg=SequentialDispatchAlg()))


def runtime_key(total: int, local: int, heads: int, head_dim: int, causal: bool, group, device):
    """MagiAttention's runtime key for one sequence of `total` tokens, `local` per rank (cached)."""
    cache = (total, local, heads, head_dim, causal, id(group))
    if cache in _KEYS:
        return _KEYS[cache]
    api = importlib.import_module("magi_attention.api")
    params = inspect.signature(api.magi_attn_varlen_key).parameters
    cu = torch.tensor([0, total], dtype=torch.int32, device=device)
    given = {
        "cu_seqlens_q": cu,
        "cu_seqlens_k": cu,
        "pad_size": 0,
        "chunk_size": local,
        "causal": causal,
        "num_heads_q": heads,
        "num_heads_kv": heads,
        "head_dim": head_dim,
        "cp_group_or_mesh": group or dist.group.WORLD,
        "cp_group": group or dist.group.WORLD,
    }
    if "x" in params:
        raise ValueError(
            "magi: this MagiAttention's magi_attn_varlen_key takes the global tensor x (an older API); "
            "use MagiAttention at or after 2c641357 (scripts/carry)"
        )
    config = _dist_config(api)
    kwargs = {name: value for name, value in given.items() if name in params}
    if config is not None and "dist_attn_config" in params:
        kwargs["dist_attn_config"] = config
    _KEYS[cache] = api.magi_attn_varlen_key(**kwargs)
    return _KEYS[cache]


class _ContiguousGrad(torch.autograd.Function):
    """Identity forward; backward hands the gradient on contiguous (module docstring: why)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def to_ours(out: torch.Tensor) -> torch.Tensor:
    """MagiAttention's [seq, heads, dim] output as our [1, heads, seq, dim] view, its gradient handed back
    to the library contiguous."""
    return _ContiguousGrad.apply(out).transpose(0, 1).unsqueeze(0)


def magi_attention(q, k, v, *, causal=False, group=None, kernel=None, scale=None, check_ranks=True):
    """MagiAttention's distributed attention on this rank's contiguous shard [1, heads, seq_local, dim]:
    (out, None)."""
    why = unavailable(q.device, kernel)
    if why:
        raise RuntimeError(why)
    batch, heads, local, dim = q.shape
    if batch != 1:
        raise ValueError(f"magi: batch {batch}; MagiAttention's varlen interface takes one packed sequence")
    from magi_attention.api import calc_attn

    key = runtime_key(local * comm.group_size(group), local, heads, dim, causal, group, q.device)
    thd = [t[0].transpose(0, 1).contiguous() for t in (q, k, v)]
    kwargs = {"softmax_scale": scale} if scale is not None else {}
    out = calc_attn(*thd, key, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    return to_ours(out), None
