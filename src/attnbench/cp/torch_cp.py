"""PyTorch's own context parallelism (torch.distributed.tensor.experimental.context_parallel) as a
baseline, behind the same call signature as our strategies.

`context_parallel(mesh, buffers=..., buffer_seq_dims=...)` patches F.scaled_dot_product_attention so
that, inside the context, SDPA on sequence shards runs PyTorch's ring implementation (K/V rotation
by all-gather by default, or all-to-all; `set_rotate_method`). With a sequence divisible by 2P it
uses the head-tail load balancer, which is our zigzag layout, so shards are interchangeable with
the zigzag strategy. We pass a dummy [1, S] buffer only so the context knows S; forward and backward
both run inside the context (the backward ops need its handlers). No LSE is returned (None).

Two fixes around PyTorch's prototype (found on torch 2.11, 2x H200):
- Its head-tail load balancing (`_cp_options.enable_load_balance`, on by default) is causal-only: a
  full mask raised "Load balancing requires `is_causal=True`". We switch it off for non-causal calls
  (every block is then a plain full block; the full mask does not care where keys sit) and restore it.
- torch <= 2.11's `context_parallel` does not undo its SDPA monkey-patch when the body raises, so
  one failure left every later F.scaled_dot_product_attention in the process dispatching to the ring
  (the next single-GPU reference then failed too). We restore it ourselves (`_sdpa_restored`).

Unavailable on CPU: only the CUDA SDPA ops (flash, efficient, cuDNN) have context-parallel handlers.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from attnbench.cp import comm
from attnbench.cp.function import prepare
from attnbench.cp.local import LocalKernel
from attnbench.cp.ring import ring_requirements

ROTATE_METHODS = ("allgather", "alltoall")


def unavailable(device: torch.device | str, kernel: str | None = None) -> str | None:
    device = torch.device(device)
    if device.type != "cuda":
        return (
            "PyTorch's context_parallel dispatches only the CUDA SDPA ops (flash, efficient, cuDNN) "
            "to its ring implementation; on CPU SDPA runs "
            "aten._scaled_dot_product_flash_attention_for_cpu, which has no context-parallel handler"
        )
    try:
        from torch.distributed.tensor.experimental import context_parallel  # noqa: F401
        from torch.distributed.tensor.experimental._attention import set_rotate_method  # noqa: F401
    except ImportError as exc:
        return f"torch {torch.__version__} has no usable context_parallel: {exc}"
    if kernel not in (None, "cudnn", "sdpa_flash"):
        return f"kernel {kernel!r}: torch_cp runs SDPA's own CUDA backends (cudnn or sdpa_flash)"
    return None


def cp_module():
    """The module holding PyTorch's context-parallel options and dispatcher (its path moved in 2.9)."""
    try:
        from torch.distributed.tensor.experimental._context_parallel import _attention as module
    except ImportError:
        from torch.distributed.tensor.experimental import _attention as module
    return module


@contextlib.contextmanager
def _options_set(module, *, rotate_method: str, load_balance: bool):
    """Rotate method and head-tail load balancing for one call; the previous values come back after."""
    options = module._cp_options
    previous = (options.rotate_method, options.enable_load_balance)
    module.set_rotate_method(rotate_method)
    options.enable_load_balance = load_balance  # causal only: PyTorch refuses it for a full mask
    try:
        yield
    finally:
        options.rotate_method, options.enable_load_balance = previous


@contextlib.contextmanager
def _sdpa_restored(module):
    """Put back the original F.scaled_dot_product_attention if context_parallel left its patch behind
    (torch <= 2.11 skips its clean-up when the body raises)."""
    original = F.scaled_dot_product_attention
    try:
        yield
    finally:
        if F.scaled_dot_product_attention is not original:
            disable = getattr(module, "_disable_context_parallel_dispatcher_impl", None)
            if disable is not None:
                disable()
            F.scaled_dot_product_attention = original


class _SdpaBackendKernel(LocalKernel):
    """Stands in for the kernel in validation: only checks that torch_cp can run here."""

    def __init__(self, kernel: str | None):
        self.kernel, self.name = kernel, f"torch_cp[{kernel or 'cudnn'}]"

    def unavailable(self, device, dtype, head_dim):
        return unavailable(device, self.kernel)


class _TorchCP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, core):
        ctx.core = core
        return core.forward(q, k, v)

    @staticmethod
    def backward(ctx, dout):
        dq, dk, dv = ctx.core.backward(dout.contiguous())
        return dq, dk, dv, None


class TorchCPCore:
    def __init__(
        self, group, causal: bool, kernel: str | None, scale: float, rotate_method: str, seq_total: int
    ):
        self.group, self.causal, self.kernel, self.scale = group, causal, kernel or "cudnn", scale
        self.rotate_method, self.seq_total = rotate_method, seq_total
        self.graph = None

    @contextlib.contextmanager
    def _context(self, device):
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor.experimental import context_parallel
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION}[self.kernel]
        group = self.group if self.group is not None else torch.distributed.group.WORLD
        mesh = DeviceMesh.from_group(group, "cuda")
        module = cp_module()
        dummy = torch.zeros((1, self.seq_total), dtype=torch.int8, device=device)
        with (
            _options_set(module, rotate_method=self.rotate_method, load_balance=self.causal),
            _sdpa_restored(module),
            context_parallel(mesh, buffers=[dummy], buffer_seq_dims=[1], no_restore_buffers={dummy}),
            sdpa_kernel([backend]),
        ):
            yield

    def forward(self, q, k, v):
        with self._context(q.device), torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = F.scaled_dot_product_attention(*leaves, is_causal=self.causal, scale=self.scale)
        self.graph = (out, leaves)
        return out.detach()

    def backward(self, dout):
        out, leaves = self.graph
        with self._context(dout.device):
            grads = torch.autograd.grad(out, leaves, dout)
        self.graph = None
        return grads


def torch_cp_attention(q, k, v, *, kernel=None, rotate_method: str = "allgather", **common):
    """PyTorch context_parallel. q/k/v: [batch, heads, seq_local, head_dim], zigzag layout.
    `common`: causal, group, scale, check_ranks, as cp.attention passes them.

    Returns (out, None): PyTorch's SDPA path does not return the LSE.
    """
    if rotate_method not in ROTATE_METHODS:
        raise ValueError(f"torch_cp: rotate_method {rotate_method!r} is not one of {ROTATE_METHODS}")
    call = prepare(
        "torch_cp",
        q,
        k,
        v,
        kernel=_SdpaBackendKernel(kernel),
        requirements=ring_requirements("zigzag"),
        **common,
    )
    if comm.in_rehearsal():
        raise ValueError("torch_cp cannot rehearse: its communication is inside PyTorch")
    world_seq = q.shape[2] * comm.group_size(call.group)
    core = TorchCPCore(call.group, call.causal, kernel, call.scale, rotate_method, world_seq)
    return _TorchCP.apply(q.contiguous(), k.contiguous(), v.contiguous(), core), None
