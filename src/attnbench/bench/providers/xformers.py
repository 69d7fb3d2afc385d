"""xFormers `memory_efficient_attention` on bshd tensors, plain and under torch.compile.

Causal is `LowerTriangularFromBottomRightMask` (our causal is bottom-right aligned; xFormers'
`LowerTriangularMask` is top-left, which differs when seqlen_q != seqlen_k). GQA uses xFormers' 5-D
BMGHK form: K/V are expanded (a view, no copy) across the query heads of each group.
"""

from __future__ import annotations

from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    compile_fn,
    cuda_missing,
    import_failure,
    mark_seq_dynamic,
    module_version,
)
from attnbench.bench.results import Workload


class XFormers(Provider):
    family = "xformers"
    layout = "bshd"
    dtypes = ("bfloat16", "float16", "float32")
    masks = ("full", "causal", "sliding_window")
    gqa = True
    backward = True

    def __init__(self, name: str, *, compiled: bool = False):
        self.name = name
        self.compiled = compiled

    def unavailable(self) -> str | None:
        return import_failure("xformers.ops") or cuda_missing()

    def version(self) -> str:
        return module_version("xformers")

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        import xformers.ops as xops
        from xformers.ops.fmha import attn_bias

        bias = None
        if workload.mask == "causal":
            bias = attn_bias.LowerTriangularFromBottomRightMask()
        elif workload.mask == "sliding_window":
            bias = attn_bias.LowerTriangularFromBottomRightLocalAttentionMask(workload.window)
        b, hq, sq, d = q.shape
        hkv = k.shape[1]
        q, k, v = (t.detach().transpose(1, 2).contiguous().requires_grad_(backward) for t in (q, k, v))
        groups = hq // hkv
        args = (q, k, v)
        if groups > 1:  # BMGHK: [b, s, hkv, groups, d]; K/V broadcast over each group (views, no copies)
            args = (
                q.view(b, sq, hkv, groups, d),
                k.unsqueeze(3).expand(-1, -1, -1, groups, -1),
                v.unsqueeze(3).expand(-1, -1, -1, groups, -1),
            )
        attention = xops.memory_efficient_attention
        if self.compiled:
            attention = compile_fn(xops.memory_efficient_attention)
            mark_seq_dynamic(args, 1)

        def run():
            return attention(*args, attn_bias=bias).reshape(b, sq, hq, d)

        note = "GQA via BMGHK expand" if groups > 1 else ""
        return Prepared(run=run, to_canonical=lambda out: out.transpose(1, 2), inputs=(q, k, v), note=note)
