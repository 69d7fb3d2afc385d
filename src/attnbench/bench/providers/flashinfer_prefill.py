"""FlashInfer's single-request prefill (`flashinfer.single_prefill_with_kv_cache`), forward only.

One sequence per call: q [qo_len, heads_q, dim], k/v [kv_len, heads_kv, dim] (kv_layout "NHD"), GQA by
head count, `causal=` (the queries are the last qo_len positions of the kv sequence: bottom-right, like
ours) and `window_left` (keys left of the query it may see; -1 = unbounded). FlashInfer's ops have no
autograd and its prefill API no backward: the backward passes are `unsupported` rows saying so.
The kernel module is JIT-compiled on first use (~96 s per module on 16 cores; scripts/carry compiles the
bf16 head-dim-128 ones in the background on our GPU machine).
"""

from __future__ import annotations

from attnbench import masks
from attnbench.bench.providers.base import Prepared, Provider, cuda_missing, import_failure, module_version
from attnbench.rows import Workload

NO_BACKWARD = "FlashInfer's prefill API has no backward"


def prefill_kwargs(workload: Workload) -> dict:
    """causal / window_left of single_prefill_with_kv_cache for the workload's mask."""
    native = masks.native(workload)
    if native is None or native.doc_lens:
        raise ValueError(f"mask {workload.mask} has no single-request prefill form")
    kwargs = {"causal": native.causal, "kv_layout": "NHD"}
    if native.window is not None:  # the query and window - 1 keys before it
        kwargs["window_left"] = native.window - 1
    return kwargs


class FlashInferPrefill(Provider):
    family = "flashinfer"
    layout = "bshd"  # per request: [seq, heads, dim]
    dtypes = ("bfloat16", "float16")
    hue = "#637939"
    mask_features = ("causal", "window")
    gqa = True
    backward = False
    head_dims = (64, 128, 256)
    install = "pip install flashinfer-python (kernels JIT-compile on first use; needs nvcc)"

    def __init__(self, name: str):
        self.name = name

    def unavailable(self) -> str | None:
        return import_failure("flashinfer", self.install) or cuda_missing()

    def version(self) -> str:
        return module_version("flashinfer")

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        if pass_ != "fwd":
            return NO_BACKWARD
        reason = super().unsupported(workload, pass_)
        if reason is None and workload.batch != 1:
            reason = (
                "single_prefill_with_kv_cache takes one request (batch 1); batches need its batch wrappers"
            )
        return reason

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        from flashinfer import single_prefill_with_kv_cache

        # [1, h, s, d] -> [s, h, d], detached (no autograd in FlashInfer's ops)
        q, k, v = (t.detach()[0].transpose(0, 1).contiguous() for t in (q, k, v))
        kwargs = prefill_kwargs(workload)
        return Prepared(
            run=lambda: single_prefill_with_kv_cache(q, k, v, **kwargs),
            to_canonical=lambda out: out.transpose(0, 1).unsqueeze(0),
            inputs=(q, k, v),
        )
