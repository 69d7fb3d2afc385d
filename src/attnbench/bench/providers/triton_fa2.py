"""Our own Triton FlashAttention-2 (`attnbench.kernels.flash_attention2`): full and causal masks, GQA,
bf16/fp16/fp32, head dims 16..128 (multiples of 8), forward and backward.

On a machine without CUDA it runs under the Triton interpreter (numpy, one program at a time): correct
but slow, so only the CPU smoke profiles use it there, and its rows say so in `extra.note`.
"""

from __future__ import annotations

from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    describe_exception,
    leaf,
    module_version,
)
from attnbench.rows import Workload

INTERPRETER_NOTE = (
    "Triton interpreter on the CPU (no GPU visible): a correctness run, not a GPU kernel; the interpreter "
    "truncates fp32->bf16 casts (a GPU rounds to nearest), so its bf16 errors are ~2x a GPU's"
)


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


class TritonFlashAttention2(Provider):
    family = "attnbench_triton"
    hue = "#393b79"
    layout = "bhsd"  # any strides whose rows are 16-byte aligned are used in place, bshd views included
    dtypes = ("bfloat16", "float16", "float32")
    mask_features = ("causal",)
    gqa = True
    backward = True
    head_dims = tuple(range(16, 129, 8))
    causal_any_lengths = False  # causal needs seqlen_q == seqlen_k

    def __init__(self, name: str, *, dq_mode: str = "recompute", input_precision: str = "tf32"):
        self.name = name
        self.dq_mode = dq_mode
        self.input_precision = input_precision
        # fp32 rows: "tf32" multiplies on TF32 tensor cores (tl.dot's default) and is judged against the
        # tf32 peak; "ieee" is true fp32, a row of its own (only fp32: 16-bit inputs ignore the option)
        self.tf32 = input_precision == "tf32"
        if input_precision == "ieee":
            self.dtypes = ("float32",)

    @property
    def needs_cuda(self) -> bool:  # the interpreter runs it on a CPU-only machine
        return _cuda_visible()

    def unavailable(self) -> str | None:
        # Import the kernel package first, not triton: without a GPU it must set TRITON_INTERPRET before
        # triton is first imported (the package docstring says why).
        try:
            import attnbench.kernels.flash_attention2  # noqa: F401 - the kernels compile lazily; this loads them
        except ModuleNotFoundError as exc:
            return f"not installed (no module {exc.name!r})"
        except Exception as exc:  # noqa: BLE001 - a load failure is a reason, never a crash
            return f"load failed: {describe_exception(exc)}"
        return None

    def version(self) -> str:
        return f"triton {module_version('triton')}"

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        from attnbench.kernels.flash_attention2 import flash_attention, interpreting

        q, k, v = (leaf(t, backward) for t in (q, k, v))
        causal = workload.mask == "causal"
        dq_mode, precision = self.dq_mode, self.input_precision

        def run():
            return flash_attention(q, k, v, causal=causal, dq_mode=dq_mode, input_precision=precision)

        note = INTERPRETER_NOTE if interpreting() else ""
        if dq_mode != "recompute":
            note = "; ".join(filter(None, [note, f"dq_mode={dq_mode}"]))
        if workload.dtype == "float32":
            note = "; ".join(filter(None, [note, f"fp32 inputs multiplied as {precision}"]))
        return Prepared(run=run, to_canonical=lambda out: out, inputs=(q, k, v), note=note)
