"""Dense attention kernels that return the log-sum-exp and take the merged LSE back in the backward.

The gather path (gathered.py) and the distributed path (distributed.py) run every sparsified segment
through one of these. Contract (as cp/local.py's, plus a layout):
  forward(q, k, v, causal=, scale=)  -> out (native layout, q.dtype), lse [batch, heads, seq_q] float32
                                        (float64 for float64 inputs), natural log;
  backward(dout, q, k, v, out, lse, causal=, scale=) -> dq, dk, dv in the native layout.
`layout` is "bhsd" ([batch, heads, seq, dim]) or "bshd"; inputs come contiguous in it. `causal` is only
used on square blocks (top-left and bottom-right alignment agree there). The backward reads `out`
only through delta = rowsum(dout * out), so passing the *merged* out and LSE of all branches gives
this segment's exact share of the gradient: that is what makes the LSE merge differentiable without
differentiating through the kernels' LSE outputs (which torch's ops mark non-differentiable).

Backends: math (pure PyTorch, any device and dtype: cp.local's MathKernel), sdpa_flash, cudnn and fa3
(cp.local: torch's FlashAttention-2 and cuDNN ops, FlashAttention-3's `flash_attn_interface`, which
refuses calls its build leaves out before they can crash the process), sdpa_efficient (torch's
memory-efficient op), xformers (`memory_efficient_attention_forward_requires_grad` and
`memory_efficient_attention_backward`). A backend that cannot load or run says why in `unavailable`.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from attnbench.bench.providers.base import describe_exception, import_failure
from attnbench.cp import local

aten = torch.ops.aten
HALF = (torch.float16, torch.bfloat16)


class BranchKernel:
    name = ""
    layout = "bhsd"
    needs_cuda = True
    dtypes: tuple[torch.dtype, ...] = HALF  # what a CUDA backend takes (the probe has the last word)
    _probes: ClassVar[dict] = {}

    def unavailable(self, device, dtype, head_dim: int) -> str | None:
        """Why this backend cannot run these inputs here (None when it can); never raises."""
        device = torch.device(device)
        if self.needs_cuda and device.type != "cuda":
            return f"needs CUDA tensors (this run is on {device.type})"
        if self.needs_cuda and dtype not in self.dtypes:
            names = "/".join(str(d).removeprefix("torch.") for d in self.dtypes)
            return f"needs {names} inputs (got {str(dtype).removeprefix('torch.')})"
        missing = self.missing()
        if missing:
            return missing
        key = (self.name, str(device), dtype, head_dim)
        if key not in self._probes:
            self._probes[key] = self._probe(device, dtype, head_dim)
        return self._probes[key]

    def missing(self) -> str | None:
        """A library that is not installed or does not import (checked before probing)."""
        return None

    def _probe(self, device, dtype, head_dim: int) -> str | None:
        """One tiny causal forward and backward: the library decides what it supports."""
        try:
            shape = (1, 1, 128, head_dim) if self.layout == "bhsd" else (1, 128, 1, head_dim)
            x = torch.randn(shape, device=device, dtype=dtype)
            out, lse = self.forward(x, x, x, causal=True, scale=head_dim**-0.5)
            self.backward(x, x, x, x, out, lse, causal=True, scale=head_dim**-0.5)
        except Exception as exc:  # noqa: BLE001 - the reason is the message
            return f"{self.name} probe failed: {describe_exception(exc)}"[:400]
        return None

    def forward(self, q, k, v, *, causal: bool, scale: float):
        raise NotImplementedError

    def backward(self, dout, q, k, v, out, lse, *, causal: bool, scale: float):
        raise NotImplementedError


class FromLocal(BranchKernel):
    """A cp.local kernel (bhsd) under its dilated backend name; cp.local decides what it can run."""

    def __init__(self, name: str, kernel: local.LocalKernel, needs_cuda: bool = True):
        self.name, self.kernel, self.needs_cuda = name, kernel, needs_cuda

    def unavailable(self, device, dtype, head_dim: int) -> str | None:
        device = torch.device(device)
        if self.needs_cuda and device.type != "cuda":
            return f"needs CUDA tensors (this run is on {device.type})"
        try:
            return self.kernel.unavailable(device, dtype, head_dim)
        except Exception as exc:  # noqa: BLE001 - the contract is a reason, never a crash
            return f"{self.name}: {describe_exception(exc)}"

    def forward(self, q, k, v, *, causal, scale):
        return self.kernel.forward(q, k, v, causal=causal, scale=scale)

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        return self.kernel.backward(dout, q, k, v, out, lse, causal=causal, scale=scale)


def _padded(lse: torch.Tensor, length: int | None) -> torch.Tensor:
    """The LSE padded along the sequence to the length the forward op returned (its backward reads
    rows by stride and some ops keep the LSE rounded up to a tile)."""
    lse = lse.float()
    if length is not None and length > lse.shape[-1]:
        lse = F.pad(lse, (0, length - lse.shape[-1]))
    return lse.contiguous()


class SdpaEfficient(BranchKernel):
    """torch's memory-efficient attention ops (aten._scaled_dot_product_efficient_attention[_backward])."""

    name = "sdpa_efficient"
    dtypes = (*HALF, torch.float32)

    def __init__(self):
        self.lse_length: dict[int, int] = {}  # seq_q -> LSE length the forward op returned
        self.seeds: dict[str, tuple] = {}

    def forward(self, q, k, v, *, causal, scale):
        out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, causal, scale=scale
        )
        self.lse_length[q.shape[2]] = lse.shape[-1]
        self.seeds.setdefault(str(q.device), (seed, offset))
        return out, lse[..., : q.shape[2]]

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        if str(q.device) not in self.seeds:  # the philox tensors are unused at dropout 0; any will do
            self.forward(q[:, :, :1], k[:, :, :1], v[:, :, :1], causal=False, scale=scale)
        seed, offset = self.seeds[str(q.device)]
        grads = aten._scaled_dot_product_efficient_attention_backward(
            dout.contiguous(),
            q,
            k,
            v,
            None,
            # out in the memory layout the forward op returns ([batch, seq, heads, dim] storage): with
            # a [batch, heads, seq, dim]-contiguous out, torch 2.11's backward gives wrong dq and dk on
            # an H200 (dv right; scripts/probe_efficient_backward.py shows it)
            out.transpose(1, 2).contiguous().transpose(1, 2),
            _padded(lse, self.lse_length.get(q.shape[2])),
            seed,
            offset,
            0.0,
            [True, True, True, False],
            causal,
            scale=scale,
        )
        return grads[0], grads[1], grads[2]


class XFormers(BranchKernel):
    """xFormers memory_efficient_attention_forward_requires_grad / memory_efficient_attention_backward."""

    name = "xformers"
    layout = "bshd"
    dtypes = (*HALF, torch.float32)

    def __init__(self):
        self.lse_length: dict[int, int] = {}

    def missing(self):
        return import_failure("xformers.ops")

    @staticmethod
    def _bias(causal: bool):
        from xformers.ops.fmha.attn_bias import LowerTriangularMask

        return LowerTriangularMask() if causal else None

    def forward(self, q, k, v, *, causal, scale):
        from xformers.ops import fmha

        out, lse = fmha.memory_efficient_attention_forward_requires_grad(
            q, k, v, attn_bias=self._bias(causal), scale=scale
        )
        self.lse_length[q.shape[1]] = lse.shape[-1]
        return out, lse[..., : q.shape[1]].float()

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        from xformers.ops import fmha

        grads = fmha.memory_efficient_attention_backward(
            dout.contiguous(),
            out.contiguous(),
            _padded(lse, self.lse_length.get(q.shape[1])),
            q,
            k,
            v,
            attn_bias=self._bias(causal),
            scale=scale,
        )
        if hasattr(grads, "dq"):
            return grads.dq, grads.dk, grads.dv
        return tuple(grads)


KERNELS: dict[str, BranchKernel] = {
    kernel.name: kernel
    for kernel in (
        FromLocal("math", local.MathKernel(), needs_cuda=False),
        FromLocal("sdpa_flash", local.SdpaFlashKernel()),
        FromLocal("cudnn", local.CudnnKernel()),
        SdpaEfficient(),
        FromLocal("fa3", local.FlashAttn3Kernel()),
        XFormers(),
    )
}
BACKENDS = tuple(KERNELS)


def get(name: str | BranchKernel | None, device=None) -> BranchKernel:
    """A backend by name; None picks cudnn on CUDA and math elsewhere."""
    if isinstance(name, BranchKernel):
        return name
    if name is None:
        name = "cudnn" if device is not None and torch.device(device).type == "cuda" else "math"
    if name not in KERNELS:
        raise ValueError(f"unknown dilated-attention backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return KERNELS[name]
