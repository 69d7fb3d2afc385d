"""Autotuning that keeps a tile only after it computed the right answer.

Triton's autotuner times every candidate tile and keeps the fastest: a tile that computes a wrong result
wins as readily as a right one (Triton 3.6's warp-specialised tiles did on an H200: configs.py). Here a
candidate's first launch during tuning is checked against PyTorch's attention on the same inputs, which
is computed once per tuned problem; a candidate whose result is off by more than REL_L2_LIMIT is timed as
infinitely slow, so it is never picked, and it is kept in `rejected()` for the report.

How it plugs in: `triton.autotune(..., post_hook=tuning.post_hook, do_bench=tuning.do_bench)`. The
autotuner times a candidate by handing `do_bench` a closure that launches it; `do_bench` launches it once
with the check armed, and the autotuner's `post_hook`, called after that launch with every kernel
argument by name, compares the kernel's outputs with the reference. Launches outside tuning are never
checked (the hook is armed only inside `do_bench`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

REL_L2_LIMIT = 2e-2  # the reports' bf16 tolerance; a broken tile is off by O(1), a right one by ~3e-3
_REFERENCES: dict = {}  # (what, inputs' fingerprints, mask, scale) -> reference tensors, while tuning
_KEEP = 2  # an output and a set of gradients: at 128k tokens x 64 heads the gradients alone are 6 GB


@dataclass(frozen=True)
class Rejection:
    kernel: str
    config: str
    errors: dict  # output name -> relative L2 error against PyTorch's attention (nan: not finite)

    def text(self) -> str:
        worst = ", ".join(f"{name} rel_l2 {err:.3g}" for name, err in self.errors.items())
        return f"{self.kernel} {self.config}: {worst}"


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp32 (nan when out holds a NaN or an inf)."""
    out, ref = out.float(), ref.float()
    if not torch.isfinite(out).all():
        return math.nan
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


class CheckedTuning:
    """The hooks of one autotuned kernel: `check(kernel arguments by name) -> {output: rel_l2}`.

    A check that cannot run (the reference itself out of memory, say) leaves that candidate timed but
    unchecked, named in `unchecked`, rather than failing the row for the reference's sake."""

    def __init__(self, kernel: str, check: Callable[[dict], dict], bench: Callable):
        self.kernel, self.check, self.bench = kernel, check, bench
        self._armed = False
        self._errors: dict | None = None
        self._config = ""
        self.rejected: list[Rejection] = []
        self.unchecked: list[str] = []

    def post_hook(self, nargs: dict, exception=None) -> None:
        if self._armed and exception is None:
            self._armed = False
            self._config = _config_text(nargs)
            try:
                self._errors = self.check(nargs)
            except Exception as exc:  # noqa: BLE001 - the reference failing is no verdict on the tile
                self._errors = {}
                self.unchecked.append(f"{self.kernel} {self._config}: {type(exc).__name__}: {exc}"[:300])

    def do_bench(self, kernel_call: Callable[[], None], quantiles):
        self._armed, self._errors = True, None
        try:
            kernel_call()  # compiles the candidate, runs it once, post_hook checks it
        finally:
            self._armed = False
        bad = {name: err for name, err in (self._errors or {}).items() if not err <= REL_L2_LIMIT}
        if bad:
            self.rejected.append(Rejection(self.kernel, self._config, bad))
            return [math.inf] * len(quantiles) if quantiles else math.inf
        return self.bench(kernel_call, quantiles)

    def refuse_rejected(self, chosen, since: int) -> None:
        """After a tuned launch: RuntimeError if the config Triton kept (`chosen`, its best_config) is one
        this launch's tuning rejected, which happens when every candidate was wrong (all timed as inf,
        Triton keeps the first). `since`: len(self.rejected) before the launch."""
        if chosen is None or len(self.rejected) == since:  # the common case, in timed launches: nothing to do
            return
        wrong = {r.config: r for r in self.rejected[since:]}
        text = _config_text(chosen.all_kwargs())
        if text in wrong:
            raise RuntimeError(
                f"{self.kernel}: every candidate tile computed a wrong result, the kept one included: "
                + "; ".join(r.text() for r in self.rejected[since:])
            )


def _config_text(nargs: dict) -> str:
    tunables = ("BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "WARP_SPECIALIZE",
                "PERSISTENT", "num_warps", "num_stages")  # fmt: skip
    return " ".join(f"{k}={nargs[k]}" for k in tunables if k in nargs)


def _fingerprint(t: torch.Tensor) -> tuple:
    """Address, shape, dtype and a sum of sampled values (every d-th row of the sequence, ~64 of them, as a
    strided view: no copy of the tensor): memory freed and allocated again at the same address with the
    same shape (the next problem of a sweep) must not find the last problem's reference."""
    view = t.detach()
    if view.dim() >= 2:
        view = view[..., :: max(1, view.shape[-2] // 64), :]
    return t.data_ptr(), tuple(t.shape), t.dtype, float(view.float().sum())


def _remember(key, make):
    if key not in _REFERENCES:
        while len(_REFERENCES) >= _KEEP:
            _REFERENCES.pop(next(iter(_REFERENCES)))
        _REFERENCES[key] = make()
    return _REFERENCES[key]


def release() -> None:
    """Drop the references (launch.py calls it once a tuned launch returned: tuning is over for that
    problem, and the memory is the next row's)."""
    _REFERENCES.clear()


def _sdpa(q, k, v, causal: bool, scale: float):
    group = q.shape[1] // k.shape[1]
    if group > 1:  # GQA: each key/value head serves `group` query heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def reference_output(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    key = ("out", *map(_fingerprint, (q, k, v)), causal, scale)
    return _remember(key, lambda: _sdpa(q, k, v, causal, scale).detach())


def reference_grads(q, k, v, dout, causal: bool, scale: float) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv) of PyTorch's attention for upstream gradient dout (dk, dv summed over a GQA group)."""
    key = ("grads", *map(_fingerprint, (q, k, v, dout)), causal, scale)

    def make():
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            _sdpa(*leaves, causal, scale).backward(dout)
        return tuple(t.grad for t in leaves)

    return _remember(key, make)


def check_forward(nargs: dict) -> dict:
    ref = reference_output(
        nargs["Q"], nargs["K"], nargs["V"], bool(nargs["CAUSAL"]), float(nargs["sm_scale"])
    )
    return {"out": rel_l2(nargs["O"], ref)}


def check_dkdv(nargs: dict, own_dq_kernel: int) -> dict:
    """dK, dV, and dQ where this kernel accumulates it (atomic modes, into the fp32 DQ_ACC)."""
    dq, dk, dv = reference_grads(nargs["Q"], nargs["K"], nargs["V"], nargs["DO"], bool(nargs["CAUSAL"]),
                                 float(nargs["sm_scale"]))  # fmt: skip
    errors = {"dk": rel_l2(nargs["DK"], dk), "dv": rel_l2(nargs["DV"], dv)}
    if nargs["DQ_ACCUMULATE"] != own_dq_kernel:
        errors["dq"] = rel_l2(nargs["DQ_ACC"][..., : dq.shape[-1]], dq)
    return errors


def check_dq(nargs: dict) -> dict:
    dq, _, _ = reference_grads(nargs["Q"], nargs["K"], nargs["V"], nargs["DO"], bool(nargs["CAUSAL"]),
                               float(nargs["sm_scale"]))  # fmt: skip
    return {"dq": rel_l2(nargs["DQ"], dq)}
