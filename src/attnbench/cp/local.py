"""Pluggable local attention kernels that return (out, lse) and have a backward given the global LSE.

Every CP strategy computes blocks with one of these. Layout is [batch, heads, seq, head_dim].
Contract:
  forward(q, k, v, causal=, scale=)  -> out (q.dtype), lse (float32, or float64 for float64 inputs),
                                        lse shape [batch, heads, seq_q], natural log.
  backward(dout, q, k, v, out, lse, causal=, scale=) -> dq, dk, dv (q.dtype).
`causal` is only used on square blocks (seq_q == seq_k), where top-left and bottom-right alignment
agree; strategies split rectangular causal regions into full blocks plus a square diagonal block.
The backward only uses `out` through delta = rowsum(dout * out) (true of the flash and cuDNN
backward ops too), so passing the *global* out and LSE gives this block's exact share of the gradient.

Kernels: "cpu_math" (pure PyTorch, any device, exact backward; used by the CPU tests),
"sdpa_flash" (aten._scaled_dot_product_flash_attention + backward op), "cudnn"
(aten._scaled_dot_product_cudnn_attention + backward op), "flash_attn3" (FlashAttention-3's own
registered ops torch.ops.flash_attn_3._flash_attn_forward / _flash_attn_backward, Hopper only).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

aten = torch.ops.aten


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """Merges and gradient sums run in float32 (float64 when the inputs are float64, for tight tests)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


class LocalKernel:
    name = ""

    def unavailable(self, device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
        """Why this kernel cannot run these inputs here (None when it can). Never raises."""
        return None

    def forward(self, q, k, v, *, causal: bool, scale: float):
        raise NotImplementedError

    def backward(self, dout, q, k, v, out, lse, *, causal: bool, scale: float):
        raise NotImplementedError


def _check_square(q, k, causal: bool) -> None:
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal local blocks must be square, got seq_q={q.shape[-2]} seq_k={k.shape[-2]}")


class MathKernel(LocalKernel):
    """Dense softmax attention in float32 (float64 for float64 inputs); exact backward."""

    name = "cpu_math"

    def _probs_logits(self, q, k, causal, scale):
        acc = accumulator_dtype(q.dtype)
        logits = torch.matmul(q.to(acc), k.to(acc).transpose(-1, -2)) * scale
        if causal:
            n = logits.shape[-1]
            above = torch.ones(n, n, dtype=torch.bool, device=q.device).triu_(1)
            logits = logits.masked_fill(above, float("-inf"))
        return logits

    def forward(self, q, k, v, *, causal, scale):
        _check_square(q, k, causal)
        logits = self._probs_logits(q, k, causal, scale)
        lse = torch.logsumexp(logits, dim=-1)
        probs = torch.exp(logits - lse.unsqueeze(-1))
        out = torch.matmul(probs, v.to(probs.dtype))
        return out.to(q.dtype), lse

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        _check_square(q, k, causal)
        acc = accumulator_dtype(q.dtype)
        probs = torch.exp(self._probs_logits(q, k, causal, scale) - lse.to(acc).unsqueeze(-1))
        dout_a = dout.to(acc)
        dv = torch.matmul(probs.transpose(-1, -2), dout_a)
        dprobs = torch.matmul(dout_a, v.to(acc).transpose(-1, -2))
        delta = (dout_a * out.to(acc)).sum(-1, keepdim=True)  # like the flash/cuDNN ops: from `out`
        dlogits = probs * (dprobs - delta)
        dq = torch.matmul(dlogits, k.to(acc)) * scale
        dk = torch.matmul(dlogits.transpose(-1, -2), q.to(acc)) * scale
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _cuda_half_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    if device.type != "cuda":
        return f"needs CUDA tensors (got {device.type})"
    if dtype not in (torch.float16, torch.bfloat16):
        return f"needs float16/bfloat16 (got {dtype})"
    return None


class _ProbedKernel(LocalKernel):
    """A GPU op whose support is decided by one tiny forward+backward per (device, dtype, head_dim)."""

    _probe_cache: ClassVar[dict] = {}

    def unavailable(self, device, dtype, head_dim):
        reason = _cuda_half_reason(device, dtype)
        if reason:
            return reason
        key = (self.name, str(device), dtype, head_dim)
        if key not in self._probe_cache:
            try:
                x = torch.randn(1, 1, 128, head_dim, device=device, dtype=dtype)
                out, lse = self.forward(x, x, x, causal=True, scale=default_scale(head_dim))
                self.backward(x, x, x, x, out, lse, causal=True, scale=default_scale(head_dim))
                self._probe_cache[key] = None
            except Exception as exc:  # noqa: BLE001 - the reason is the message
                self._probe_cache[key] = f"{self.name} probe failed: {type(exc).__name__}: {exc}"[:400]
        return self._probe_cache[key]


class _SeedCache:
    """The philox seed/offset tensors the forward op returned, handed back to its backward op.

    dropout_p is 0, so their values are never read; reusing the forward's own tensors keeps their
    dtype and shape what the backward op expects in any torch version.
    """

    def __init__(self, fallback):
        self.by_device: dict = {}
        self.fallback = fallback

    def keep(self, device, seed, offset) -> None:
        self.by_device.setdefault(str(device), (seed, offset))

    def get(self, device):
        if str(device) not in self.by_device:
            self.by_device[str(device)] = self.fallback(device)
        return self.by_device[str(device)]


def _last_dim_contiguous(t):
    return t if t.stride(-1) == 1 else t.contiguous()


class SdpaFlashKernel(_ProbedKernel):
    name = "sdpa_flash"
    seeds = _SeedCache(
        lambda device: (
            torch.empty(2, dtype=torch.uint64, device=device),
            torch.empty((), dtype=torch.uint64, device=device),
        )
    )

    def forward(self, q, k, v, *, causal, scale):
        _check_square(q, k, causal)
        q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
        res = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
        self.seeds.keep(q.device, res[6], res[7])
        return res[0], res[1][..., : q.shape[-2]]

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        _check_square(q, k, causal)
        dout, q, k, v, out = (_last_dim_contiguous(t) for t in (dout, q, k, v, out))
        seed, offset = self.seeds.get(q.device)
        dq, dk, dv = aten._scaled_dot_product_flash_attention_backward(
            dout,
            q,
            k,
            v,
            out,
            lse.float().contiguous(),
            None,
            None,
            q.shape[-2],
            k.shape[-2],
            0.0,
            causal,
            seed,
            offset,
            scale=scale,
        )
        return dq, dk, dv


class CudnnKernel(_ProbedKernel):
    name = "cudnn"
    seeds = _SeedCache(lambda device: (torch.zeros((), dtype=torch.int64, device=device),) * 2)

    def forward(self, q, k, v, *, causal, scale):
        _check_square(q, k, causal)
        q, k, v = (t.contiguous() for t in (q, k, v))
        res = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
        self.seeds.keep(q.device, res[6], res[7])
        lse = res[1]
        if lse.dim() == 4:  # cuDNN keeps a trailing singleton dimension
            lse = lse.squeeze(-1)
        return res[0], lse

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        _check_square(q, k, causal)
        # cuDNN wants out/dout with the same (contiguous) strides as q.
        dout, q, k, v, out = (t.contiguous() for t in (dout, q, k, v, out))
        seed, offset = self.seeds.get(q.device)
        lse4 = lse.float().contiguous().unsqueeze(-1)
        dq, dk, dv = aten._scaled_dot_product_cudnn_attention_backward(
            dout,
            q,
            k,
            v,
            out,
            lse4,
            seed,
            offset,
            None,
            None,
            None,
            q.shape[-2],
            k.shape[-2],
            0.0,
            causal,
            scale=scale,
        )
        return dq, dk, dv


class FlashAttn3Kernel(_ProbedKernel):
    """FlashAttention-3 on [b, h, s, d] views: FA3 reads bshd strides, so the transposed views need no copy.

    FA3's backward op writes dq, dk, dv into tensors we allocate; it derives delta = rowsum(dout * out)
    from `out` like the other ops, so the global out and LSE give this block's share of the gradient.
    """

    name = "flash_attn3"

    def unavailable(self, device, dtype, head_dim):
        try:
            import flash_attn_interface  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - not installed or fails to load: the reason
            return (
                f"flash_attn_interface (FlashAttention-3) cannot be imported: {type(exc).__name__}: {exc}; "
                "build it from flash-attention's hopper/ folder (no PyPI wheel)"
            )[:400]
        from attnbench.bench.providers.flash_attn3 import build_leaves_out
        from attnbench.rows import Workload

        # a call outside what this build holds can crash the process instead of raising: ask first
        dtype_name = str(dtype).removeprefix("torch.")
        left_out = build_leaves_out(Workload(1, 128, 128, 1, 1, head_dim, dtype_name, "causal"), "fwd_bwd")
        return left_out or super().unavailable(device, dtype, head_dim)

    def forward(self, q, k, v, *, causal, scale):
        from flash_attn_interface import _flash_attn_forward

        _check_square(q, k, causal)
        q, k, v = (_last_dim_contiguous(t).transpose(1, 2) for t in (q, k, v))
        out, lse, *_ = _flash_attn_forward(q, k, v, softmax_scale=scale, causal=causal)
        return out.transpose(1, 2), lse

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        from flash_attn_interface import _flash_attn_backward

        _check_square(q, k, causal)
        dout, q, k, v, out = (_last_dim_contiguous(t).transpose(1, 2) for t in (dout, q, k, v, out))
        dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
        _flash_attn_backward(
            dout,
            q,
            k,
            v,
            out,
            lse.float().contiguous(),
            dq=dq,
            dk=dk,
            dv=dv,
            softmax_scale=scale,
            is_causal=causal,
        )
        return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


def flash_attn3_bhsd(q, k, v, *, causal: bool):
    """FlashAttention-3's public (differentiable) flash_attn_func on [b, h, s, d] tensors: FA3 reads the
    transposed views' strides, so no copy is made. The single-GPU reference of the flash_attn3 kernel."""
    from flash_attn_interface import flash_attn_func

    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
    return (out[0] if isinstance(out, (tuple, list)) else out).transpose(1, 2)


KERNELS: dict[str, LocalKernel] = {
    k.name: k for k in (MathKernel(), SdpaFlashKernel(), CudnnKernel(), FlashAttn3Kernel())
}


def get_kernel(name: str | LocalKernel | None, device: torch.device | None = None) -> LocalKernel:
    """A kernel by name; None picks "cudnn" on CUDA and "cpu_math" elsewhere."""
    if isinstance(name, LocalKernel):
        return name
    if name is None:
        name = "cudnn" if device is not None and device.type == "cuda" else "cpu_math"
    if name not in KERNELS:
        raise ValueError(f"unknown local kernel {name!r}; choose one of {sorted(KERNELS)}")
    return KERNELS[name]
