"""Every strategy against single-device attention on the same global inputs (GPU or CPU).

Every rank builds the same global q, k, v, dO (one seed), shards them in the strategy's layout and
runs the strategy forward and backward. The reference is float32 math attention on the whole
sequence (one head at a time, autograd). Single-device SDPA with the same kernel family on the whole
sequence is compared with the same reference, and a strategy passes when each of out, dq, dk, dv is
within 3x the single-device error + 2e-3 x max|reference| (CP adds one rounding per block partial:
the kernels return block outputs and gradients in the input dtype) and the LSE within 1e-3 (float32).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from attnbench.bench.correctness import full_fp32_matmul
from attnbench.bench.distributed import attempt
from attnbench.cp import attention, comm, get_strategy
from attnbench.cp.local import flash_attn3_bhsd, get_kernel
from attnbench.rows import Status
from attnbench.studies.context_parallel.measure import strategy_label

METRICS = ("out", "dq", "dk", "dv")
LSE_TOLERANCE = 1e-3
RELATIVE_TOLERANCE = 2e-3
SINGLE_FACTOR = 3.0


REF_CHUNK_BYTES = 1 << 30  # the reference's fp32 working set per query chunk (4 [rows, S] tensors)


def reference_fp32(q, k, v, dout, causal: bool, chunk_bytes: int = REF_CHUNK_BYTES) -> dict:
    """Exact float32 attention and its gradients, one head and one chunk of query rows at a time:
    out, lse, dq, dk, dv. Each chunk holds its rows' every key, so its softmax is exact and its
    backward (dq of its rows; its share of dk, dv) follows at once: memory is linear in the sequence
    (the [rows, S] logits of one chunk at most `chunk_bytes` x 4), so the reference fits one GPU at
    the timed lengths. Causal: rows see keys up to their own position (keys past the chunk skipped)."""
    batch, heads, seq, dim = q.shape
    scale = 1.0 / math.sqrt(dim)
    res = {m: torch.zeros(q.shape, dtype=torch.float32, device=q.device) for m in ("out", "dq", "dk", "dv")}
    res["lse"] = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    rows = max(1, min(seq, chunk_bytes // (4 * seq)))
    positions = torch.arange(seq, device=q.device)
    with full_fp32_matmul(), torch.no_grad():  # the reference must not round like the kernels it checks
        for b in range(batch):
            for h in range(heads):
                qh, kh, vh, doh = (t[b, h].float() for t in (q, k, v, dout))
                for i0 in range(0, seq, rows):
                    i1 = min(seq, i0 + rows)
                    end = i1 if causal else seq
                    logits = (qh[i0:i1] @ kh[:end].T) * scale
                    if causal:
                        logits.masked_fill_(
                            positions[:end][None, :] > positions[i0:i1][:, None], float("-inf")
                        )
                    lse = torch.logsumexp(logits, -1)
                    probs = torch.exp(logits - lse[:, None])
                    del logits
                    out = probs @ vh[:end]
                    res["out"][b, h, i0:i1], res["lse"][b, h, i0:i1] = out, lse
                    delta = (doh[i0:i1] * out).sum(-1)
                    res["dv"][b, h, :end] += probs.T @ doh[i0:i1]
                    dscores = probs * (doh[i0:i1] @ vh[:end].T - delta[:, None]) * scale
                    del probs
                    res["dq"][b, h, i0:i1] = dscores @ kh[:end]
                    res["dk"][b, h, :end] += dscores.T @ qh[i0:i1]
    return res


def shared_reference(q, k, v, dout, causal: bool, group=None) -> dict:
    """reference_fp32 with its heads split over the group's ranks and all-gathered (every rank gets the
    whole reference in 1/world of the time); every rank computes it whole when the heads do not divide
    or the batch is not 1 (the gathered head blocks must be contiguous)."""
    world, rank, heads = comm.group_size(group), comm.group_rank(group), q.shape[1]
    if world == 1 or heads % world or q.shape[0] != 1:
        return reference_fp32(q, k, v, dout, causal)
    per = heads // world
    mine = reference_fp32(*(t[:, rank * per : (rank + 1) * per] for t in (q, k, v, dout)), causal)
    whole = {}
    for name, part in mine.items():
        full = part.new_empty((part.shape[0], heads, *part.shape[2:]))
        dist.all_gather(list(full.split(per, dim=1)), part.contiguous(), group=group)
        whole[name] = full
    return whole


def single_device(q, k, v, dout, causal: bool, kernel: str) -> dict:
    """The kernel's own family on the whole sequence: SDPA with its backend (math on CPU), or
    FlashAttention-3's flash_attn_func for the flash_attn3 kernel: out, dq, dk, dv."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    if kernel == "flash_attn3" and q.is_cuda:
        out = flash_attn3_bhsd(*leaves, causal=causal)
    else:
        backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION}.get(
            kernel, SDPBackend.MATH
        )
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    out.backward(dout)
    return {"out": out.detach(), "dq": leaves[0].grad, "dk": leaves[1].grad, "dv": leaves[2].grad}


def _max_err(a, b) -> float:
    return (a.float() - b.float()).abs().max().item()


def global_inputs(seq_len: int, heads: int, head_dim: int, dtype, device, seed: int = 1234):
    gen = torch.Generator(device=device).manual_seed(seed)  # identical global tensors on every rank
    shape = (1, heads, seq_len, head_dim)
    return [torch.randn(shape, generator=gen, device=device, dtype=dtype) for _ in range(4)]


def beyond(err: float, bound: float) -> bool:
    """err exceeds bound; a NaN error exceeds every bound."""
    return not (err <= bound)


def combine_verdicts(verdicts: list) -> dict:
    """(ok, errors, lse_err) of every rank -> the worst errors, ok, status and reason (NaN is worst), and
    every rank's own errors in rank order, its LSE error among them (`rank_errors`: the worst of each
    metric may come from different ranks, and a single-device error that differs between strategies of
    one layout is only explained rank by rank)."""
    errors = {
        m: max((v[1][m] for v in verdicts), key=lambda e: (beyond(e["cp"], e["bound"]), e["cp"] - e["bound"]))
        for m in METRICS
    }
    lse_errs = [v[2] for v in verdicts if v[2] is not None]
    lse_err = max(lse_errs, key=lambda e: (math.isnan(e), e)) if lse_errs else None
    ok = all(v[0] for v in verdicts)
    failed = [m for m in METRICS if beyond(errors[m]["cp"], errors[m]["bound"])]
    if lse_err is not None and beyond(lse_err, LSE_TOLERANCE):
        failed.append("lse")
    return {
        "errors": errors,
        "rank_errors": [_with_lse(v[1], v[2]) for v in verdicts],
        "lse_err": lse_err,
        "ok": ok,
        "status": "ok" if ok else "incorrect",
        "reason": f"beyond tolerance: {', '.join(failed)}" if failed else "",
    }


def _with_lse(errors: dict, lse_err: float | None) -> dict:
    """A rank's errors with its LSE error beside them (a rank that fails on the LSE alone is named)."""
    return errors if lse_err is None else {**errors, "lse": {"cp": lse_err, "bound": LSE_TOLERANCE}}


def check_strategy(
    name: str,
    inputs,
    ref: dict,
    single: dict,
    *,
    causal: bool,
    kernel: str,
    group=None,
    options: dict | None = None,
) -> dict:
    """One strategy, one mask: the same verdict dict on every rank."""
    q, k, v, dout = inputs
    world, rank, device = comm.group_size(group), comm.group_rank(group), q.device
    options = dict(options or {})
    result = {
        "strategy": strategy_label(name, kernel),
        "kernel": kernel,
        "mask": "causal" if causal else "full",
        "seq_len": q.shape[2],
        "heads": q.shape[1],
        "head_dim": q.shape[3],
        "dtype": str(q.dtype).replace("torch.", ""),
        "world_size": world,
        "options": options,
        "errors": {},
        "lse_err": None,
        "reason": "",
    }
    spec = get_strategy(name)
    reason = spec.unavailable(device, kernel) or get_kernel(kernel, device).unavailable(
        device, q.dtype, q.shape[-1]
    )
    if reason:
        return {**result, "status": "unavailable", "ok": None, "reason": reason}
    layout = spec.layout(world, q.shape[1], **options)
    state: dict = {}

    def run():
        mine = [layout.shard(t, rank) for t in (q, k, v, dout)]
        leaves = [t.clone().requires_grad_() for t in mine[:3]]
        out, lse = attention(*leaves, strategy=name, causal=causal, kernel=kernel, group=group, **options)
        out.backward(mine[3])
        state.update(out=out.detach(), lse=lse, dq=leaves[0].grad, dk=leaves[1].grad, dv=leaves[2].grad)

    status, message = attempt(run, group)
    if status != Status.OK:
        return {**result, "status": status, "ok": None, "reason": message}
    ok = True
    for m in METRICS:
        expected = layout.shard(ref[m], rank)
        e_cp, e_single = _max_err(state[m], expected), _max_err(layout.shard(single[m], rank), expected)
        ref_max = expected.abs().max().item()  # also what the single-device run is judged on (checks.py)
        bound = SINGLE_FACTOR * e_single + RELATIVE_TOLERANCE * ref_max
        result["errors"][m] = {"cp": e_cp, "single": e_single, "bound": bound, "ref_max": ref_max}
        ok &= not beyond(e_cp, bound)
    if state["lse"] is not None:
        result["lse_err"] = _max_err(state["lse"], layout.shard(ref["lse"], rank))
        ok &= not beyond(result["lse_err"], LSE_TOLERANCE)
    verdicts: list = [None] * world  # a case passes only if it passes on every rank; report the worst
    dist.all_gather_object(verdicts, (ok, result["errors"], result["lse_err"]), group=group)
    result.update(combine_verdicts(verdicts))
    return result


def check_all(
    strategies,
    *,
    seq_len: int,
    heads: int,
    head_dim: int,
    kernel: str | None = None,
    kernels: list[str] | None = None,
    dtype=torch.bfloat16,
    group=None,
    strategy_options: dict | None = None,
    progress=None,
) -> list[dict]:
    """Every strategy x {causal, full} x local kernel (`kernels`, or the one `kernel`, default the
    device's); the fp32 reference is computed once per mask for every kernel. `progress(result)` after
    each (every rank)."""
    device = comm.comm_device(group)
    kernels = list(kernels or [kernel or get_kernel(None, device).name])
    inputs = global_inputs(seq_len, heads, head_dim, dtype, device)
    results = []
    for causal in (True, False):
        ref = shared_reference(*inputs, causal, group=group)
        for name_kernel in kernels:
            single = single_device(*inputs, causal, name_kernel)
            for name in strategies:
                result = check_strategy(
                    name,
                    inputs,
                    ref,
                    single,
                    causal=causal,
                    kernel=name_kernel,
                    group=group,
                    options=(strategy_options or {}).get(name),
                )
                results.append(result)
                if progress:
                    progress(result)
            del single
            if device.type == "cuda":
                torch.cuda.empty_cache()
        del ref
    return results
