"""cuDNN's SDPA graph called directly through NVIDIA's Python frontend (`nvidia-cudnn-frontend`, `import cudnn`).

PyTorch's `sdpa_cudnn` reaches the same library through SDPA's dispatcher and its own vendored C++
frontend; this provider builds cuDNN's graph itself, once per workload (setup), so the two rows show
what cuDNN can do apart from what PyTorch's dispatch makes of it.

- `cudnn_frontend`: bf16/fp16 forward (with the softmax stats when a backward follows) and the
  `sdpa_backward` graph, wrapped in an autograd.Function so the sweep times forward, backward and
  both like any provider. Causal is the diagonal band with right bound 0 (top-left == bottom-right
  at seqlen_q == seqlen_k); a sliding window adds the left bound. GQA natively (h_q % h_kv == 0).
- `cudnn_frontend_fp8`: the e4m3 forward (`sdpa_fp8`). On Hopper cuDNN 9.19 writes O in fp8 too (a
  bf16 O is Blackwell-only), so the graph gets per-tensor scales: descale_{q,k,v} = amax/448,
  scale_s = 448 (P in [0, 1] fills the e4m3 range), scale_o = 1/descale_v (|O| <= max|V|). Inputs
  are quantised and O dequantised outside the timed call; judged with the quantised tolerance.

Every graph is built with an explicit cuDNN handle bound to the current stream: 1.32's lowering needs
one (without it a missing cuda-python would read as "no engine proposed a plan"). The row's note
names the engine that serves the plan (the libcudnn backend, or one of the frontend's own engines).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from attnbench import masks
from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    Unsupported,
    cuda_missing,
    describe_exception,
    import_failure,
    module_version,
)
from attnbench.rows import Workload

E4M3_MAX = 448.0


VARLEN_REASON = (
    "documents (cu_seqlens) are not wired to cuDNN here: cuDNN 9.19 takes them only as a padding mask "
    "with ragged (THD) offsets (cu_seq_len_q/kv need cuDNN >= 9.24); FlashAttention-3 and FlexAttention "
    "run these masks"
)


def _mask_kwargs(cudnn, workload: Workload, fp8: bool = False) -> dict:
    """Diagonal-band arguments (names differ between sdpa and sdpa_fp8) from the mask's native form."""
    native = masks.native(workload)
    if native is None or native.doc_lens:
        raise Unsupported(f"mask {workload.mask}: no diagonal-band form")
    if not native.causal:
        return {}
    right, left = (
        ("right_bound", "left_bound") if fp8 else ("diagonal_band_right_bound", "diagonal_band_left_bound")
    )
    kwargs = {"diagonal_alignment": cudnn.diagonal_alignment.TOP_LEFT, right: 0}
    if native.window is not None:
        kwargs[left] = native.window  # keys i - window < j <= i: the band's left bound is the window
    return kwargs


def _io_type(cudnn, dtype) -> Any:
    import torch

    return {
        torch.bfloat16: cudnn.data_type.BFLOAT16,
        torch.float16: cudnn.data_type.HALF,
        torch.float8_e4m3fn: cudnn.data_type.FP8_E4M3,
    }[dtype]


def _engine(graph) -> str:
    engine = getattr(graph, "selected_engine", None)
    return "libcudnn backend" if engine is None else f"frontend engine {engine}"


@dataclass
class _Built:
    """One built graph, its tensors by role, and its workspace."""

    graph: Any
    tensors: dict
    workspace: Any
    handle: Any

    def pack(self, **buffers) -> dict:
        """A variant pack (graph tensor -> torch tensor) by role; made once for what every call reuses."""
        return {self.tensors[role]: tensor for role, tensor in buffers.items()}

    def execute(self, fixed: dict, **per_call) -> None:
        """Run with the prebuilt `fixed` pack plus the buffers this call allocated (its outputs)."""
        self.graph.execute({**fixed, **self.pack(**per_call)}, self.workspace, handle=self.handle)


def _build(cudnn, graph, tensors: dict, handle, device) -> _Built:
    import torch

    graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    workspace = torch.empty(max(graph.get_workspace_size(), 1), dtype=torch.uint8, device=device)
    return _Built(graph, tensors, workspace, handle)


def _output(tensor, like_shape, like_stride, data_type):
    tensor.set_output(True).set_dim(list(like_shape)).set_stride(list(like_stride)).set_data_type(data_type)


class CudnnFrontend(Provider):
    family = "cudnn_frontend"
    hue = "#8c564b"
    layout = "bhsd"
    dtypes = ("bfloat16", "float16")
    mask_features = ("causal", "window")
    gqa = True
    backward = True
    causal_any_lengths = False  # top-left band: the same as bottom-right only at seqlen_q == seqlen_k
    head_dims = tuple(range(8, 257, 8))
    install = "pip install nvidia-cudnn-frontend (uses the libcudnn of the installed torch/nvidia-cudnn)"

    def __init__(self, name: str):
        self.name = name

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        native = masks.native(workload)
        if native is not None and native.doc_lens and super().unsupported(workload, pass_):
            return VARLEN_REASON
        return super().unsupported(workload, pass_)

    def unavailable(self) -> str | None:
        missing = import_failure("cudnn", self.install) or cuda_missing()
        if missing:
            return missing
        try:
            import cudnn

            cudnn.backend_version()
        except Exception as exc:  # noqa: BLE001 - libcudnn not found or not loadable: the reason
            return f"cudnn frontend loaded, but libcudnn did not: {describe_exception(exc)}"
        return None

    def version(self) -> str:
        try:
            import cudnn

            return f"{module_version('cudnn')} (libcudnn {cudnn.backend_version()})"
        except Exception:  # noqa: BLE001
            return module_version("cudnn")

    def _handle(self, q):
        import cudnn
        import torch

        handle = cudnn.create_handle()
        if q.is_cuda:  # launches go to the stream the timing events are recorded on
            cudnn.set_stream(handle, torch.cuda.current_stream(q.device).cuda_stream)
        return handle

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        import cudnn
        import torch

        q, k, v = (t.detach().contiguous().requires_grad_(backward) for t in (q, k, v))
        io, f32 = _io_type(cudnn, q.dtype), cudnn.data_type.FLOAT
        scale = 1.0 / math.sqrt(workload.head_dim)
        handle = self._handle(q)
        b, hq, sq, d = q.shape
        o_shape, o_stride = (b, hq, sq, d), (hq * sq * d, sq * d, d, 1)
        stats_shape, stats_stride = (b, hq, sq, 1), (hq * sq, sq, 1, 1)
        try:
            g = cudnn.pygraph(
                io_data_type=io, intermediate_data_type=f32, compute_data_type=f32, handle=handle
            )
            tq, tk, tv = (g.tensor_like(t) for t in (q, k, v))
            o, stats = g.sdpa(
                q=tq, k=tk, v=tv, generate_stats=backward, attn_scale=scale, **_mask_kwargs(cudnn, workload)
            )
            _output(o, o_shape, o_stride, io)
            tensors = {"q": tq, "k": tk, "v": tv, "o": o}
            if backward:
                _output(stats, stats_shape, stats_stride, f32)
                tensors["stats"] = stats
            fwd = _build(cudnn, g, tensors, handle, q.device)
            bwd = None
            if backward:
                like = torch.empty(o_shape, dtype=q.dtype, device=q.device)
                st = torch.empty(stats_shape, dtype=torch.float32, device=q.device)
                gb = cudnn.pygraph(
                    io_data_type=io, intermediate_data_type=f32, compute_data_type=f32, handle=handle
                )
                bq, bk, bv, bo, bdo, bst = (gb.tensor_like(t) for t in (q, k, v, like, like, st))
                dq, dk, dv = gb.sdpa_backward(
                    q=bq,
                    k=bk,
                    v=bv,
                    o=bo,
                    dO=bdo,
                    stats=bst,
                    attn_scale=scale,
                    use_deterministic_algorithm=False,
                    **_mask_kwargs(cudnn, workload),
                )
                for t, like_t in ((dq, q), (dk, k), (dv, v)):
                    _output(t, like_t.shape, like_t.stride(), io)
                bwd = _build(
                    cudnn,
                    gb,
                    {
                        "q": bq,
                        "k": bk,
                        "v": bv,
                        "o": bo,
                        "do": bdo,
                        "stats": bst,
                        "dq": dq,
                        "dk": dk,
                        "dv": dv,
                    },
                    handle,
                    q.device,
                )
        except Exception as exc:
            raise Unsupported(f"cuDNN graph not supported: {describe_exception(exc)}") from exc

        fwd_inputs = fwd.pack(q=q, k=k, v=v)
        bwd_inputs = bwd.pack(q=q, k=k, v=v) if bwd is not None else {}

        def forward():  # outputs are allocated per call, as every provider's API call does
            out = torch.empty(o_shape, dtype=q.dtype, device=q.device)
            if bwd is None:
                fwd.execute(fwd_inputs, o=out)
                return out, None
            lse = torch.empty(stats_shape, dtype=torch.float32, device=q.device)
            fwd.execute(fwd_inputs, o=out, stats=lse)
            return out, lse

        def backward_fn(dout, out, lse):
            dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
            bwd.execute(bwd_inputs, o=out, do=dout.contiguous(), stats=lse, dq=dq, dk=dk, dv=dv)
            return dq, dk, dv

        note = f"cuDNN graph via cudnn-frontend, forward on {_engine(fwd.graph)}"
        if bwd is not None:
            note += f", backward on {_engine(bwd.graph)}"
        if not backward:
            return Prepared(
                run=lambda: forward()[0], to_canonical=lambda out: out, inputs=(q, k, v), note=note
            )
        return Prepared(
            run=lambda: _graph_attention().apply(q, k, v, forward, backward_fn),
            to_canonical=lambda out: out,
            inputs=(q, k, v),
            note=note,
        )


@functools.cache  # torch is imported lazily by providers: the class is made on first use
def _graph_attention():
    import torch

    class GraphAttention(torch.autograd.Function):
        """Forward and backward graphs as one differentiable call (the sweep times it like any provider)."""

        @staticmethod
        def forward(ctx, q, k, v, forward, backward_fn):
            out, lse = forward()
            ctx.save_for_backward(out, lse)
            ctx.backward_fn = backward_fn
            return out

        @staticmethod
        def backward(ctx, dout):
            out, lse = ctx.saved_tensors
            dq, dk, dv = ctx.backward_fn(dout, out, lse)
            return dq, dk, dv, None, None

    return GraphAttention


class CudnnFrontendFp8(CudnnFrontend):
    """cuDNN's e4m3 forward; quantisation and dequantisation outside the timed call."""

    quantized = True
    tolerance = "quantized_fp8_output"  # O itself is e4m3 (correctness.py: the bound adds its rounding)
    backward = False
    dtypes = ("bfloat16",)
    mask_features = ("causal",)
    head_dims = tuple(range(16, 257, 16))

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        import cudnn
        import torch

        f8, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        handle = self._handle(q)

        def quantize(t):
            descale = (t.detach().float().abs().amax() / E4M3_MAX).clamp(min=torch.finfo(torch.float32).tiny)
            return (t.detach().float() / descale).to(torch.float8_e4m3fn).contiguous(), descale.reshape(
                1, 1, 1, 1
            )

        (q8, dq_), (k8, dk_), (v8, dv_) = (quantize(t) for t in (q, k, v))
        scalars = {
            "descale_q": dq_,
            "descale_k": dk_,
            "descale_v": dv_,
            "descale_s": torch.full((1, 1, 1, 1), 1.0 / E4M3_MAX, device=q.device),
            "scale_s": torch.full((1, 1, 1, 1), E4M3_MAX, device=q.device),
            "scale_o": (1.0 / dv_).reshape(1, 1, 1, 1),
        }
        b, hq, sq, d = q.shape
        o_shape, o_stride = (b, hq, sq, d), (hq * sq * d, sq * d, d, 1)
        stats_shape, stats_stride = (b, hq, sq, 1), (hq * sq, sq, 1, 1)
        try:
            g = cudnn.pygraph(
                io_data_type=f8, intermediate_data_type=f32, compute_data_type=f32, handle=handle
            )
            tq, tk, tv = (g.tensor_like(t) for t in (q8, k8, v8))
            ts = {n: g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32) for n in scalars}
            o, stats, amax_s, amax_o = g.sdpa_fp8(
                q=tq,
                k=tk,
                v=tv,
                **ts,
                generate_stats=True,
                attn_scale=1.0 / math.sqrt(d),
                **_mask_kwargs(cudnn, workload, fp8=True),
            )
            _output(o, o_shape, o_stride, f8)
            _output(stats, stats_shape, stats_stride, f32)
            for amax in (amax_s, amax_o):
                _output(amax, (1, 1, 1, 1), (1, 1, 1, 1), f32)
            built = _build(
                cudnn,
                g,
                {"q": tq, "k": tk, "v": tv, "o": o, "stats": stats, "amax_s": amax_s, "amax_o": amax_o, **ts},
                handle,
                q.device,
            )
        except Exception as exc:
            raise Unsupported(f"cuDNN fp8 graph not supported: {describe_exception(exc)}") from exc
        lse = torch.empty(stats_shape, dtype=torch.float32, device=q.device)
        amaxes = {n: torch.zeros(1, 1, 1, 1, device=q.device) for n in ("amax_s", "amax_o")}

        fixed = built.pack(q=q8, k=k8, v=v8, stats=lse, **amaxes, **scalars)

        def run():
            out = torch.empty(o_shape, dtype=torch.float8_e4m3fn, device=q.device)
            built.execute(fixed, o=out)
            return out

        return Prepared(
            run=run,
            to_canonical=lambda out: (out.float() * dv_).to(torch.bfloat16),  # O_fp8 = O * scale_o
            inputs=(q8, k8, v8),
            note=(
                f"fp8 e4m3 in and out (a bf16 O is Blackwell-only); per-tensor scales, quantised and "
                f"dequantised outside the timed call; {_engine(built.graph)}"
            ),
        )
