"""The one autograd Function every strategy runs through, and the shared front end.

A strategy is a *core*: `forward(q, k, v) -> (out, lse, saved)` and `backward(dout, saved) ->
(dq, dk, dv)`, where `saved` is a tuple of tensors (kept with save_for_backward). Cores compose:
Ulysses wraps a local core (plain Ulysses) or a ring core (USP) in all-to-alls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from attnbench.cp.local import LocalKernel, default_scale, get_kernel
from attnbench.cp.validate import Requirements, validate


class CPAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, core):
        out, lse, saved = core.forward(q, k, v)
        ctx.core = core
        ctx.save_for_backward(*saved)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        dq, dk, dv = ctx.core.backward(dout.contiguous(), ctx.saved_tensors)
        return dq, dk, dv, None


class LocalCore:
    """One kernel call over the whole local sequence (world 1, or heads-sharded inside Ulysses)."""

    def __init__(self, kernel: LocalKernel, causal: bool, scale: float):
        self.kernel, self.causal, self.scale = kernel, causal, scale

    def forward(self, q, k, v):
        out, lse = self.kernel.forward(q, k, v, causal=self.causal, scale=self.scale)
        return out, lse, (q, k, v, out, lse)

    def backward(self, dout, saved):
        q, k, v, out, lse = saved
        return self.kernel.backward(dout, q, k, v, out, lse, causal=self.causal, scale=self.scale)


@dataclass(frozen=True)
class Call:
    """A strategy call after `prepare`: the resolved kernel and scale, and the caller's causal and group."""

    kernel: LocalKernel
    scale: float
    causal: bool
    group: object


def prepare(
    strategy: str,
    q,
    k,
    v,
    *,
    requirements: Requirements,
    options: Mapping[str, int] | None = None,
    causal: bool = False,
    group=None,
    kernel=None,
    scale=None,
    check_ranks: bool = True,
) -> Call:
    """The shared front end of every strategy: its keywords (causal, group, kernel, scale, check_ranks)
    are the ones `cp.attention` passes. Validates (one tiny collective; `options` go after causal in the
    check) and resolves the kernel (a name, None or a LocalKernel) and scale."""
    kernel_obj = get_kernel(kernel, q.device if isinstance(q, torch.Tensor) else None)
    validate(
        q,
        k,
        v,
        group,
        strategy=strategy,
        kernel=kernel_obj,
        requirements=requirements,
        options={"causal": int(causal), **(options or {})},
        check_ranks=check_ranks,
    )
    return Call(kernel_obj, default_scale(q.shape[-1]) if scale is None else float(scale), causal, group)


def run_core(core, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of `core`, differentiable in q, k, v; inputs made contiguous for the transfers."""
    return CPAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), core)
