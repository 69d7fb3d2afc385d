"""A workload's inputs: canonical q, k, v ([batch, heads, seq, head_dim], randn from a seeded generator on
the device, cast to the workload dtype; scores have unit spread after the 1/sqrt(d) scale), the output
gradient, and the Workspace that holds them with the fp32 references every provider is checked against."""

from __future__ import annotations

import torch

from attnbench.bench import correctness, timing
from attnbench.bench.providers.base import describe_exception
from attnbench.rows import Workload


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")  # noqa: TRY004 - a bad value, not a bad type
    return dtype


def _randn(shape, gen, device, dtype):
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def make_inputs(workload: Workload, device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Canonical q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] in the workload dtype."""
    w, dtype = workload, torch_dtype(workload.dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    q = _randn((w.batch, w.heads_q, w.seqlen_q, w.head_dim), gen, device, dtype)
    k = _randn((w.batch, w.heads_kv, w.seqlen_k, w.head_dim), gen, device, dtype)
    v = _randn((w.batch, w.heads_kv, w.seqlen_k, w.head_dim), gen, device, dtype)
    return q, k, v


def make_dout(workload: Workload, device, seed: int = 0) -> torch.Tensor:
    w = workload
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    return _randn((w.batch, w.heads_q, w.seqlen_q, w.head_dim), gen, device, torch_dtype(w.dtype))


class Workspace:
    """Inputs and (lazily) references of one workload, shared by every provider (and by the masks
    report's series driver, which calls run_one itself)."""

    def __init__(self, workload: Workload, device, seed: int, reference: bool):
        self.workload, self.device, self.seed, self.reference = workload, device, seed, reference
        self.q, self.k, self.v = make_inputs(workload, device, seed)
        self._out = self._grads = self._dout = None
        self.reference_error: str | None = None if reference else "reference check disabled"

    @property
    def dout(self) -> torch.Tensor:
        if self._dout is None:
            self._dout = make_dout(self.workload, self.device, self.seed)
        return self._dout

    def _reference(self, make):
        if self.reference_error:
            return None
        try:
            return make()
        except Exception as exc:  # noqa: BLE001 - an OOM in the reference must not end the sweep either
            self.reference_error = f"reference failed: {describe_exception(exc)}"
            timing.release_memory(self.device)
            return None

    def ref_out(self):
        if self._out is None:
            self._out = self._reference(
                lambda: correctness.reference_attention(self.q, self.k, self.v, self.workload)
            )
        return self._out

    def ref_grads(self):
        if self._grads is None:
            self._grads = self._reference(
                lambda: correctness.reference_grads(self.q, self.k, self.v, self.dout, self.workload)
            )
        return self._grads
