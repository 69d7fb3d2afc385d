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

from attnbench.bench.distributed import attempt
from attnbench.cp import attention, comm, get_strategy
from attnbench.cp.local import flash_attn3_bhsd, get_kernel
from attnbench.rows import Status
from attnbench.studies.context_parallel.measure import strategy_label

METRICS = ("out", "dq", "dk", "dv")
LSE_TOLERANCE = 1e-3
RELATIVE_TOLERANCE = 2e-3
SINGLE_FACTOR = 3.0


def reference_fp32(q, k, v, dout, causal: bool) -> dict:
    """float32 math attention, one head at a time (bounded memory): out, lse, dq, dk, dv."""
    res: dict[str, list] = {m: [] for m in ("out", "lse", "dq", "dk", "dv")}
    scale = 1.0 / math.sqrt(q.shape[-1])
    for h in range(q.shape[1]):
        qh, kh, vh = (t[:, h : h + 1].float().requires_grad_() for t in (q, k, v))
        logits = (qh @ kh.transpose(-1, -2)) * scale
        if causal:
            n = logits.shape[-1]
            logits = logits.masked_fill(
                torch.ones(n, n, dtype=torch.bool, device=q.device).triu_(1), float("-inf")
            )
        lse = torch.logsumexp(logits, -1)
        out = torch.softmax(logits, -1) @ vh
        out.backward(dout[:, h : h + 1].float())
        for name, t in (("out", out), ("lse", lse), ("dq", qh.grad), ("dk", kh.grad), ("dv", vh.grad)):
            res[name].append(t.detach())
        del logits, out
    return {m: torch.cat(ts, dim=1) for m, ts in res.items()}


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
    """(ok, errors, lse_err) of every rank -> the worst errors, ok, status and reason (NaN is worst)."""
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
        "lse_err": lse_err,
        "ok": ok,
        "status": "ok" if ok else "incorrect",
        "reason": f"beyond tolerance: {', '.join(failed)}" if failed else "",
    }


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
        bound = SINGLE_FACTOR * e_single + RELATIVE_TOLERANCE * expected.abs().max().item()
        result["errors"][m] = {"cp": e_cp, "single": e_single, "bound": bound}
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
    dtype=torch.bfloat16,
    group=None,
    strategy_options: dict | None = None,
    progress=None,
) -> list[dict]:
    """Every strategy x {causal, full}; `progress(result)` after each (every rank)."""
    device = comm.comm_device(group)
    kernel = kernel or get_kernel(None, device).name
    inputs = global_inputs(seq_len, heads, head_dim, dtype, device)
    results = []
    for causal in (True, False):
        ref = reference_fp32(*inputs, causal)
        single = single_device(*inputs, causal, kernel)
        for name in strategies:
            result = check_strategy(
                name,
                inputs,
                ref,
                single,
                causal=causal,
                kernel=kernel,
                group=group,
                options=(strategy_options or {}).get(name),
            )
            results.append(result)
            if progress:
                progress(result)
        del ref, single
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results
