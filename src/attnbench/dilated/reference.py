"""The reference implementations of dilated attention: dense masks built from the definition.

`reference_attention` is the definition itself (pattern.py), in float64 on CPU or float32 without TF32
on a GPU, from the same (possibly bf16) inputs the implementations get:
  for each branch i, a dense boolean mask [heads, N, N] from `pattern.branch_allowed`; masked softmax
  attention gives (O_i, lse_i), with O_i = 0 and lse_i = -inf on rows the branch does not keep; then
  the LSE merge O = sum_i exp(lse_i - L) O_i, L = log sum_i exp(lse_i), which leaves O = 0 and
  L = -inf where no branch keeps the row. Gradients come from autograd through these ops, written so
  that masked rows produce zeros, never NaN (no exp(-inf - -inf), no log 0 on a gradient path).

`union_attention` is the single-softmax form: scores + log m(q, k) over the union of the branches'
pairs (m = multiplicity). It equals the definition exactly (pattern.py derives why; tests check it to
float64 rounding), so `chunked_reference`, which needs no [N, N] tensor per branch and no autograd,
can use it at medium lengths on a GPU: query rows in chunks, the softmax backward written out
(dS = P * (dP - rowsum(dO * O))).
"""

from __future__ import annotations

import math

import torch

from attnbench.dilated import pattern

CHUNK_ELEMENTS = 1 << 27  # score elements per query chunk in chunked_reference (512 MiB in fp32)


def compute_dtype(device) -> torch.dtype:
    return torch.float64 if torch.device(device).type == "cpu" else torch.float32


def _no_tf32():
    from attnbench.bench.correctness import full_fp32_matmul

    return full_fp32_matmul()


def _masked_softmax(scores: torch.Tensor, allowed: torch.Tensor):
    """(probabilities, lse, row has a key) with all-masked rows giving p = 0, lse = -inf, no NaN."""
    scores = scores.masked_fill(~allowed, -math.inf)
    any_key = allowed.any(dim=-1, keepdim=True)
    row_max = torch.where(any_key, scores.amax(dim=-1, keepdim=True), torch.zeros_like(scores[..., :1]))
    p = torch.exp(scores - row_max)  # exp(-inf) = 0 on masked entries
    denom = p.sum(dim=-1, keepdim=True)
    safe = torch.where(any_key, denom, torch.ones_like(denom))
    lse = torch.where(any_key, torch.log(safe) + row_max, torch.full_like(denom, -math.inf))
    lse = lse.squeeze(-1)
    return p / safe, lse, any_key.squeeze(-1).expand(lse.shape)


def merge(parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]):
    """Exact LSE merge of (out_i, lse_i, valid_i); rows valid in no part get out 0, lse -inf.

    Weights use finite stand-ins for -inf so that autograd never sees exp(-inf - -inf) or log 0.
    """
    valid = torch.stack([v for _, _, v in parts])  # [branches, b, h, n]
    lse = torch.stack([torch.where(v, x, torch.zeros_like(x)) for _, x, v in parts])
    any_valid = valid.any(dim=0)
    top = torch.where(valid, lse, torch.full_like(lse, -math.inf)).amax(dim=0)
    top = torch.where(any_valid, top, torch.zeros_like(top))
    e = torch.where(valid, torch.exp(lse - top), torch.zeros_like(lse))
    total = e.sum(dim=0)
    safe = torch.where(any_valid, total, torch.ones_like(total))
    out = sum((e[i] / safe).unsqueeze(-1) * o for i, (o, _, _) in enumerate(parts))
    merged_lse = torch.where(any_valid, torch.log(safe) + top, torch.full_like(top, -math.inf))
    return out, merged_lse


def _prepare(q, k, v):
    dtype = compute_dtype(q.device)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def reference_attention(q, k, v, branches, *, causal: bool, scale: float | None = None):
    """(out, lse) of LongNet's definition, differentiable; q, k, v [batch, heads, N, head_dim].

    Small sizes only: one [batch, heads, N, N] score tensor per branch.
    """
    branches = pattern.branches_from(branches)
    _, h, n, d = q.shape
    pattern.check(branches, n)
    scale = pattern.default_scale(d) if scale is None else scale
    q, k, v = _prepare(q, k, v)
    head, q_idx, kv_idx = pattern.grid(n, h, q.device)
    with _no_tf32():
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        parts = []
        for branch in branches:
            allowed = pattern.branch_allowed(branch, head, q_idx, kv_idx, causal).expand(h, n, n)
            p, lse, valid = _masked_softmax(scores, allowed)
            parts.append((torch.matmul(p, v), lse, valid))
        return merge(parts)


def union_attention(q, k, v, branches, *, causal: bool, scale: float | None = None):
    """(out, lse) of one softmax over the union with log-multiplicity scores; differentiable."""
    branches = pattern.branches_from(branches)
    _, h, n, d = q.shape
    pattern.check(branches, n)
    scale = pattern.default_scale(d) if scale is None else scale
    q, k, v = _prepare(q, k, v)
    count = pattern.dense_multiplicity(branches, n, h, causal, q.device)
    with _no_tf32():
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        scores = scores + torch.log(count.clamp_min(1).to(scores.dtype))
        p, lse, _ = _masked_softmax(scores, count > 0)
        return torch.matmul(p, v), lse


def _chunk_rows(batch: int, heads: int, seq_len: int) -> int:
    return max(1, CHUNK_ELEMENTS // (batch * heads * seq_len))


def chunked_reference(q, k, v, dout, branches, *, causal: bool, scale: float | None = None):
    """(out, lse, dq, dk, dv) of the union form, query rows in chunks, no autograd; fp32 on GPU
    (TF32 off), float64 on CPU. `dout` None: forward only (the gradients are None)."""
    branches = pattern.branches_from(branches)
    b, h, n, d = q.shape
    pattern.check(branches, n)
    scale = pattern.default_scale(d) if scale is None else scale
    q, k, v = _prepare(q, k, v)
    out = torch.zeros_like(q)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
    grads = dout is not None
    if grads:
        dout = dout.to(q.dtype)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rows = _chunk_rows(b, h, n)
    with torch.no_grad(), _no_tf32():
        for start in range(0, n, rows):
            end = min(start + rows, n)
            count = pattern.dense_multiplicity(branches, n, h, causal, q.device, rows=(start, end))
            scores = torch.matmul(q[:, :, start:end], k.transpose(-1, -2)) * scale
            scores += torch.log(count.clamp_min(1).to(scores.dtype))
            p, chunk_lse, _ = _masked_softmax(scores, count > 0)
            del scores, count
            chunk_out = torch.matmul(p, v)
            out[:, :, start:end], lse[:, :, start:end] = chunk_out, chunk_lse
            if grads:
                do = dout[:, :, start:end]
                dv += torch.matmul(p.transpose(-1, -2), do)
                dp = torch.matmul(do, v.transpose(-1, -2))
                ds = p * (dp - (do * chunk_out).sum(dim=-1, keepdim=True))
                dq[:, :, start:end] = torch.matmul(ds, k) * scale
                dk += torch.matmul(ds.transpose(-1, -2), q[:, :, start:end]) * scale
    if not grads:
        return out, lse, None, None, None
    return out, lse, dq, dk, dv


def reference_grads(q, k, v, dout, branches, *, causal: bool, scale: float | None = None):
    """(out, lse, dq, dk, dv) of the definition via autograd (small sizes)."""
    dtype = compute_dtype(q.device)  # gradients in the reference precision, not the inputs' dtype
    leaves = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
    out, lse = reference_attention(*leaves, branches, causal=causal, scale=scale)
    grads = torch.autograd.grad(out, leaves, dout.to(out.dtype))
    return (out.detach(), lse.detach(), *grads)
