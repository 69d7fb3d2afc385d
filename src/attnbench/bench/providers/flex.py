"""FlexAttention: `torch.compile(flex_attention)` with a BlockMask built in prepare (setup).

The mask_mods come from bench.masks, the same functions the FLOP counts and the reference use, so
every mask in the DESIGN runs here. `flex_eager` is the uncompiled path (a dense reference-style
implementation that also runs on CPU); the compiled one is the kernel people deploy.
"""

from __future__ import annotations

from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    Unsupported,
    compile_fn,
    cuda_missing,
    leaf,
    mark_seq_dynamic,
)
from attnbench.bench.results import MASKS, Workload


class FlexAttention(Provider):
    family = "flex"
    layout = "bhsd"
    dtypes = ("bfloat16", "float16", "float32")
    masks = MASKS
    gqa = True  # enable_gqa=True
    backward = True

    def __init__(self, name: str, *, compiled: bool = True):
        self.name = name
        self.compiled = compiled
        self.needs_cuda = compiled  # compiled flex on CPU needs a C++ toolchain and minutes; not offered

    def unavailable(self) -> str | None:
        missing = cuda_missing() if self.needs_cuda else None
        if missing:
            return missing
        try:
            from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            return f"this torch has no FlexAttention ({type(exc).__name__})"
        return None

    def version(self) -> str:
        import torch

        return torch.__version__

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        import warnings

        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        from attnbench.bench import masks

        if backward and not q.is_cuda:
            raise Unsupported("FlexAttention has no backward on CPU")
        q, k, v = (leaf(t, backward) for t in (q, k, v))
        mod = masks.mask_mod(workload, device=q.device)
        block_mask = None
        if mod is not None:  # B=None, H=None: the mask is the same for every batch element and head
            block_mask = create_block_mask(
                mod, None, None, workload.seqlen_q, workload.seqlen_k, device=q.device
            )
        kwargs = {"block_mask": block_mask, "enable_gqa": workload.gqa}
        if self.compiled:
            fn = compile_fn(flex_attention)
            mark_seq_dynamic((q, k, v), 2)

            def run():
                return fn(q, k, v, **kwargs)
        else:

            def run():
                with warnings.catch_warnings():  # "called without torch.compile": that is the point here
                    warnings.simplefilter("ignore", UserWarning)
                    return flex_attention(q, k, v, **kwargs)

        note = f"block mask sparsity {block_mask.sparsity():.1f}%" if block_mask is not None else ""
        return Prepared(run=run, to_canonical=lambda out: out, inputs=(q, k, v), note=note)
