"""Why the dilated gather path is wrong with torch's memory-efficient kernel on a GPU (dq, dk off; dv right).

Two probes, each printing rel_l2 of dq, dk, dv against the cuDNN backend (or against autograd over
SDPA's math kernel for the single-kernel probe):
  1. the kernel alone: forward, then backward with its own out and LSE, at the segment lengths the
     paper's configuration gathers (2048, and 2731 = ceil(32768 / 12)), causal and full;
  2. the whole dilated call at growing lengths (the gathered batch grows with the length).
Run on a CUDA machine: python3 scripts/probe_efficient_backward.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnbench.dilated import dilated_attention
from attnbench.dilated.kernels import SdpaEfficient


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def kernel_alone(batch, heads, length, causal):
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(batch, heads, length, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                     for _ in range(4))  # fmt: skip
    scale = 128**-0.5
    kernel = SdpaEfficient()
    out, lse = kernel.forward(q, k, v, causal=causal, scale=scale)
    dq, dk, dv = kernel.backward(dout, q, k, v, out, lse, causal=causal, scale=scale)
    qr, kr, vr = (t.float().requires_grad_(True) for t in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=scale)
    ref.backward(dout.float())
    return rel(out, ref), rel(dq, qr.grad), rel(dk, kr.grad), rel(dv, vr.grad)


def whole_call(seq, causal):
    from attnbench.dilated.pattern import PAPER_BRANCHES, for_length

    branches = for_length([list(b) for b in PAPER_BRANCHES], seq, extend=True)
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(1, 16, seq, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                     for _ in range(4))  # fmt: skip
    grads = {}
    for backend in ("cudnn", "sdpa_efficient"):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out, _ = dilated_attention(*leaves, branches, causal=causal, implementation="gather", backend=backend)
        out.backward(dout)
        grads[backend] = (out, *(t.grad for t in leaves))
    return [rel(a, b) for a, b in zip(grads["sdpa_efficient"], grads["cudnn"])]


def call_variants(batch, heads, length, causal):
    """rel_l2 of dq against fp32 math for: torch's own autograd over the EFFICIENT backend, then the aten
    backward called with (a) the forward's LSE as returned, (b) out as returned (BSHD strides), (c) both."""
    aten = torch.ops.aten
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(batch, heads, length, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                     for _ in range(4))  # fmt: skip
    scale = 128**-0.5
    qr, kr, vr = (t.float().requires_grad_(True) for t in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=scale).backward(dout.float())
    results = {}
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION):
        F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale).backward(dout)
    results["torch autograd"] = rel(leaves[0].grad, qr.grad)
    out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(
        q, k, v, None, True, 0.0, causal, scale=scale
    )
    for name, o, l in (("out.contiguous(), LSE as returned", out.contiguous(), lse),
                       ("out as returned, LSE as returned", out, lse),
                       ("out as returned, LSE sliced+padded", out, F.pad(lse[..., :length].float(), (0, lse.shape[-1] - length)).contiguous())):  # fmt: skip
        grads = aten._scaled_dot_product_efficient_attention_backward(
            dout.contiguous(),
            q,
            k,
            v,
            None,
            o,
            l,
            seed,
            offset,
            0.0,
            [True, True, True, False],
            causal,
            scale=scale,
        )
        results[name] = rel(grads[0], qr.grad)
    grads = aten._scaled_dot_product_efficient_attention_backward(
        out.new_empty(out.shape).copy_(dout), q, k, v, None, out, lse, seed, offset, 0.0, [True, True, True, False],
        causal, scale=scale)  # fmt: skip
    results["dout with out's strides, out and LSE as returned"] = rel(grads[0], qr.grad)
    return results


if __name__ == "__main__":
    import sys

    if "--variants" in sys.argv:
        for length, causal in ((2048, True), (2731, False)):
            for name, err in call_variants(4, 2, length, causal).items():
                print(f"  L={length} causal={causal}: dq rel_l2 {err:.2e}  {name}")
        raise SystemExit(0)
    print("1. the kernel alone, own out and LSE: rel_l2 out, dq, dk, dv against fp32 math")
    for length in (2048, 2731, 4096):
        for causal in (True, False):
            for batch in (1, 16):
                errs = kernel_alone(batch, 2, length, causal)
                print(
                    f"  B={batch:<3} L={length:<5} causal={causal!s:<5} " + " ".join(f"{e:.2e}" for e in errs)
                )
    print("2. the whole dilated call: rel_l2 out, dq, dk, dv of sdpa_efficient against cudnn")
    for seq in (4096, 8192, 16384, 32768):
        for causal in (True, False):
            errs = whole_call(seq, causal)
            print(f"  N={seq:<6} causal={causal!s:<5} " + " ".join(f"{e:.2e}" for e in errs))
