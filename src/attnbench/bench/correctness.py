"""The fp32 math reference (forward and gradients) and the comparison of a provider's output with it.

Reference: softmax(q k^T * scale + mask) v computed in float32 on CUDA (float64 on CPU, where shapes are
tiny), from the same low-precision inputs the provider gets (so input rounding is not counted as
error). GQA: query head h uses key/value head h // (heads_q // heads_kv) (repeat_interleave, the
convention of SDPA enable_gqa, flash-attn, FlexAttention). Rows with no allowed key (bottom-right
causal with Sq > Sk) are defined as 0, as flash-attn returns. Work is chunked over query rows so the
score matrix never exceeds CHUNK_ELEMENTS.

Comparison: rel_l2 = ||out - ref|| / ||ref||, max_abs, mean_abs. A result passes when it is finite
(NaN/inf never passes) and both rel_l2 <= tol.rel_l2 and max_abs <= tol.max_abs * max|ref|.
The max_abs bound catches local errors (one wrong row or tile) that barely move rel_l2.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch

from attnbench import masks
from attnbench.rows import Workload

CHUNK_ELEMENTS = 1 << 27  # scores per query chunk: 512 MiB in fp32


@dataclass(frozen=True)
class Tolerance:
    name: str
    rel_l2: float  # bound on ||out - ref|| / ||ref||
    max_abs: float  # bound on max|out - ref| as a fraction of max|ref|


# Why these values (measured on CPU against a float64 reference, S = 512..4608, head_dim 128, randn
# inputs): a flash-style bf16 kernel (fp32 scores, P rounded to bf16, fp32 accumulation) has rel_l2
# ~2.3e-3 and max_abs ~3e-3 * max|ref|; a naive all-bf16 math implementation ~5.7e-3 and ~1.5e-2.
# Bounds sit ~3x above the naive implementation; a 2 % scale error (rel_l2 2e-2) is at the bf16
# limit, a single wrong output row in a non-causal problem shows max_abs > 0.3 * max|ref|.
# fp16 has 3 more mantissa bits: errors are ~8x smaller, so are the bounds. fp32 workloads allow TF32
# (10-bit mantissa, fp16-like errors ~3e-4) but not a silent bf16 computation (~2e-3 .. 6e-3).
# Quantised kernels (int8 QK^T, fp8 PV: SageAttention) and fp8 inputs: rel_l2 6e-2 is what a cosine
# similarity of 0.998 implies; a wrong mask or scale is still far above (rel_l2 > 0.2).
# A kernel that also WRITES its output in e4m3 (cuDNN's fp8 forward on Hopper) adds the rounding of
# the output itself: e4m3 keeps 3 mantissa bits, unit roundoff u = 2^-4, so even the exact result
# rounded to e4m3 is off by up to u (RMS u/sqrt(3) = 3.6%) per element. Its bound is the quantised one
# plus u, on both measures: still far below a wrong mask or scale.
TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance("float32 (TF32 allowed)", rel_l2=2e-3, max_abs=4e-3),
    "bfloat16": Tolerance("bfloat16", rel_l2=2e-2, max_abs=4e-2),
    "float16": Tolerance("float16", rel_l2=4e-3, max_abs=8e-3),
    "quantized": Tolerance("quantized (int8/fp8)", rel_l2=6e-2, max_abs=2e-1),
    "quantized_fp8_output": Tolerance("quantized, e4m3 output", rel_l2=6e-2 + 2**-4, max_abs=2e-1 + 2**-4),
}
GRAD_FACTOR = 2.0  # gradients go through one more rounding chain (dS = P * (dP - D)): bounds x2


def tolerance_for(dtype, quantized: bool | str = False, grad: bool = False) -> Tolerance:
    """The tolerance for outputs (or gradients) of a `dtype` workload; fp8 dtypes count as quantised.

    `quantized`: True for the quantised bound, or the name of a TOLERANCES entry (a provider's own).
    """
    name = str(dtype).removeprefix("torch.")
    if isinstance(quantized, str):
        tol = TOLERANCES[quantized]
    elif quantized or name.startswith("float8"):
        tol = TOLERANCES["quantized"]
    elif name in TOLERANCES:
        tol = TOLERANCES[name]
    else:
        raise ValueError(f"no tolerance for dtype {name!r} (known: {sorted(TOLERANCES)}, float8_*)")
    if grad:
        tol = Tolerance(tol.name + " gradient", tol.rel_l2 * GRAD_FACTOR, tol.max_abs * GRAD_FACTOR)
    return tol


@dataclass(frozen=True)
class Comparison:
    max_abs: float
    mean_abs: float
    rel_l2: float
    ok: bool
    tolerance: Tolerance
    reason: str = ""  # why it failed ("" when ok)

    def to_dict(self) -> dict:
        row = asdict(self)
        row["tolerance"] = asdict(self.tolerance)
        return row


def compare(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype,
    quantized: bool | str = False,
    grad: bool = False,
    what: str = "out",
) -> Comparison:
    """Compare `out` with the reference `ref` (same shape) under the tolerance of `dtype`."""
    tol = tolerance_for(dtype, quantized, grad)
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(
            math.inf,
            math.inf,
            math.inf,
            False,
            tol,
            f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}",
        )
    a = out.detach().to(device=ref.device, dtype=torch.float64)
    b = ref.detach().to(torch.float64)
    diff = (a - b).abs()
    finite = bool(torch.isfinite(a).all())
    max_abs = float(diff.max()) if diff.numel() else 0.0
    mean_abs = float(diff.mean()) if diff.numel() else 0.0
    ref_norm, diff_norm = float(b.norm()), float((a - b).norm())
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    bound = tol.max_abs * (float(b.abs().max()) if b.numel() else 0.0)

    def failed(detail: str) -> Comparison:
        return Comparison(max_abs, mean_abs, rel_l2, False, tol, f"{what}: {detail}")

    if not finite:
        bad = int((~torch.isfinite(a)).sum())
        return failed(f"{bad} non-finite values (NaN/inf)")
    if rel_l2 > tol.rel_l2:
        return failed(f"rel_l2 {rel_l2:.3g} > {tol.rel_l2:g} ({tol.name})")
    if max_abs > bound:
        return failed(f"max_abs {max_abs:.3g} > {tol.max_abs:g} * max|ref| = {bound:.3g} ({tol.name})")
    return Comparison(max_abs, mean_abs, rel_l2, True, tol)


def worst(comparisons: dict[str, Comparison]) -> Comparison:
    """The failing comparison if any (first by name order), else the one closest to its rel_l2 bound."""
    failing = [c for c in comparisons.values() if not c.ok]
    if failing:
        return failing[0]
    return max(comparisons.values(), key=lambda c: c.rel_l2 / c.tolerance.rel_l2)


@contextmanager
def full_fp32_matmul():
    """Forbid TF32 in the reference even if a provider library switched it on globally."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def compute_dtype(device) -> torch.dtype:
    return torch.float64 if torch.device(device).type == "cpu" else torch.float32


def _expand_kv(t: torch.Tensor, heads_q: int) -> torch.Tensor:
    return t.repeat_interleave(heads_q // t.shape[1], dim=1) if t.shape[1] != heads_q else t


def _check_shapes(q, k, v, workload: Workload) -> None:
    w = workload
    want = {
        "q": (w.batch, w.heads_q, w.seqlen_q, w.head_dim),
        "k": (w.batch, w.heads_kv, w.seqlen_k, w.head_dim),
        "v": (w.batch, w.heads_kv, w.seqlen_k, w.head_dim),
    }
    for name, t in zip("qkv", (q, k, v)):
        if tuple(t.shape) != want[name]:
            raise ValueError(
                f"{name} has shape {tuple(t.shape)}, workload {w.label()} needs {want[name]} "
                "([batch, heads, seq, head_dim])"
            )


def _chunks(workload: Workload):
    rows = max(1, CHUNK_ELEMENTS // (workload.batch * workload.heads_q * workload.seqlen_k))
    for start in range(0, workload.seqlen_q, rows):
        yield start, min(start + rows, workload.seqlen_q)


def _probabilities(q_chunk, k, workload, start, end, scale):
    """Softmax probabilities of query rows [start, end); fully masked rows are all zero."""
    scores = torch.matmul(q_chunk, k.transpose(-1, -2)) * scale
    if not masks.of(workload).is_full:
        allowed = masks.dense_mask(workload, device=scores.device, q_start=start, q_end=end)
        scores = scores.masked_fill(~allowed, -math.inf)
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    p = torch.exp(scores - row_max)
    denom = p.sum(dim=-1, keepdim=True)
    return p / torch.where(denom > 0, denom, torch.ones_like(denom))


def reference_attention(q, k, v, workload: Workload, scale: float | None = None) -> torch.Tensor:
    """[batch, heads_q, Sq, head_dim] reference output in fp32 (float64 on CPU), on q's device."""
    _check_shapes(q, k, v, workload)
    dt = compute_dtype(q.device)
    scale = 1.0 / math.sqrt(workload.head_dim) if scale is None else scale
    q, k, v = q.to(dt), _expand_kv(k.to(dt), workload.heads_q), _expand_kv(v.to(dt), workload.heads_q)
    out = torch.empty_like(q)
    with torch.no_grad(), full_fp32_matmul():
        for start, end in _chunks(workload):
            p = _probabilities(q[:, :, start:end], k, workload, start, end, scale)
            out[:, :, start:end] = torch.matmul(p, v)
    return out


def reference_grads(q, k, v, dout, workload: Workload, scale: float | None = None):
    """(dq, dk, dv) of sum(out * dout) in fp32 (float64 on CPU), shaped like q, k, v (GQA summed)."""
    _check_shapes(q, k, v, workload)
    dt = compute_dtype(q.device)
    scale = 1.0 / math.sqrt(workload.head_dim) if scale is None else scale
    heads_kv = k.shape[1]
    q, dout = q.to(dt), dout.to(dt)
    k, v = _expand_kv(k.to(dt), workload.heads_q), _expand_kv(v.to(dt), workload.heads_q)
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    with torch.no_grad(), full_fp32_matmul():
        for start, end in _chunks(workload):
            q_c, do_c = q[:, :, start:end], dout[:, :, start:end]
            p = _probabilities(q_c, k, workload, start, end, scale)
            out_c = torch.matmul(p, v)
            dv += torch.matmul(p.transpose(-1, -2), do_c)
            dp = torch.matmul(do_c, v.transpose(-1, -2))
            ds = p * (dp - (do_c * out_c).sum(dim=-1, keepdim=True))  # softmax backward, D = rowsum(dO*O)
            dq[:, :, start:end] = torch.matmul(ds, k) * scale
            dk += torch.matmul(ds.transpose(-1, -2), q_c) * scale
    if heads_kv != workload.heads_q:
        group = workload.heads_q // heads_kv
        b, _, s, d = dk.shape
        dk = dk.view(b, heads_kv, group, s, d).sum(dim=2)
        dv = dv.view(b, heads_kv, group, s, d).sum(dim=2)
    return dq, dk, dv
