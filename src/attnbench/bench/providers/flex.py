"""FlexAttention: `torch.compile(flex_attention)` with a BlockMask built in prepare (setup).

The mask_mods come from the mask registry (attnbench.masks), the same functions the FLOP counts and the reference use, so
every registered mask runs here. The BlockMask is built from the mask's dense form a chunk of query
rows at a time (`block_mask`), so a 128k x 128k mask never exists whole (create_block_mask would
materialise it, or compile per mask_mod); its build time is part of setup_ms. `flex_eager` is the uncompiled path (a dense reference-style
implementation that also runs on CPU); the compiled one is the kernel people deploy.
"""

from __future__ import annotations

from attnbench import masks
from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    Unsupported,
    compile_fn,
    cuda_missing,
    leaf,
    mark_seq_dynamic,
)
from attnbench.rows import Workload

CHUNK_ELEMENTS = 1 << 28  # dense mask elements evaluated at once while building a BlockMask


def block_mask(workload: Workload, device, block: int = 128):
    """FlexAttention BlockMask of the workload's mask (None for a full mask), built chunk by chunk.

    Every (query block, key block) tile is empty, full (no mask_mod call inside) or partial, from the
    exact dense mask; partial tiles keep the mask_mod, so the result equals create_block_mask's.
    """
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    mask = masks.of(workload)
    mod = mask.mask_mod(workload, device)
    if mod is None:
        return None
    sq, sk = workload.seqlen_q, workload.seqlen_k
    nq, nk = -(-sq // block), -(-sk // block)
    full = torch.zeros(nq, nk, dtype=torch.bool, device=device)
    partial = torch.zeros_like(full)
    step = max(1, CHUNK_ELEMENTS // (block * nk * block))  # query blocks per chunk
    for qb in range(0, nq, step):
        q0, q1 = qb * block, min(sq, (qb + step) * block)
        dense = mask.dense(workload, device, q0, q1)
        rows = -(-(q1 - q0) // block)
        padded = torch.zeros(rows * block, nk * block, dtype=torch.bool, device=device)
        padded[: q1 - q0, :sk] = dense
        count = padded.view(rows, block, nk, block).sum(dim=(1, 3))
        full[qb : qb + rows] = count == block * block
        partial[qb : qb + rows] = (count > 0) & (count < block * block)

    def ordered(tiles):
        num = tiles.sum(dim=-1, dtype=torch.int32)[None, None]
        idx = torch.argsort(tiles.to(torch.int32), dim=-1, descending=True, stable=True).to(torch.int32)
        return num.contiguous(), idx[None, None].contiguous()

    kv_num, kv_idx = ordered(partial)
    full_num, full_idx = ordered(full)
    return BlockMask.from_kv_blocks(
        kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block, mask_mod=mod, seq_lengths=(sq, sk)
    )


_BLOCK_TENSORS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                  "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")  # fmt: skip


def mark_block_mask_dynamic(tiles) -> None:
    """Let dynamo treat the block counts and the mask_mod's captured tensors (document ids, positions)
    as dynamic in the sequence, so a new length or document count reuses the compiled kernel instead of
    compiling it again (measured on CPU: one compile per mask instead of two)."""
    import torch

    for name in _BLOCK_TENSORS:
        t = getattr(tiles, name, None)
        if isinstance(t, torch.Tensor):
            for dim in range(2, t.dim()):
                torch._dynamo.maybe_mark_dynamic(t, dim)
    seen: set[int] = set()
    todo = [tiles.mask_mod]
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            value = cell.cell_contents
            values = value if isinstance(value, tuple) else (value,)
            for item in values:
                if isinstance(item, torch.Tensor) and item.dim() == 1:
                    torch._dynamo.maybe_mark_dynamic(item, 0)
                elif callable(item):
                    todo.append(item)


class FlexAttention(Provider):
    family = "flex"
    hue = "#2ca02c"
    layout = "bhsd"
    dtypes = ("bfloat16", "float16", "float32")
    mask_features = (masks.ANY_MASK,)  # block_mask from the mask_mod: every registered mask
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

        from torch.nn.attention.flex_attention import flex_attention

        if backward and not q.is_cuda:
            raise Unsupported("FlexAttention has no backward on CPU")
        q, k, v = (leaf(t, backward) for t in (q, k, v))
        # B=1, H=1 broadcast: the mask is the same for every batch element and head
        tiles = block_mask(workload, q.device)
        kwargs = {"block_mask": tiles, "enable_gqa": workload.gqa}
        if self.compiled:
            fn = compile_fn(flex_attention)
            mark_seq_dynamic((q, k, v), 2)
            if tiles is not None:
                mark_block_mask_dynamic(tiles)

            def run():
                return fn(q, k, v, **kwargs)
        else:

            def run():
                with warnings.catch_warnings():  # "called without torch.compile": that is the point here
                    warnings.simplefilter("ignore", UserWarning)
                    return flex_attention(q, k, v, **kwargs)

        note = f"block mask sparsity {tiles.sparsity():.1f}% (built in setup)" if tiles is not None else ""
        return Prepared(run=run, to_canonical=lambda out: out, inputs=(q, k, v), note=note)
