"""xFormers `memory_efficient_attention` on bshd tensors: its dispatcher and each fmha op, plain and compiled.

- `xformers` / `xformers_compiled`: the dispatcher picks the op (the row's note names the one it
  picked for these inputs, forward and backward).
- `xformers_cutlass`, `xformers_fa2`, `xformers_fa3` (+ `_compiled`): one op pinned with
  `op=(FwOp, BwOp)`. An op this install cannot load is an `unavailable` row with xFormers' own reason
  (e.g. fa3F needs the `flash_attn_3` package); an op that refuses these inputs is `unsupported` with
  the op's `not_supported_reasons`.

The PyPI wheel is built against CUDA 12: on a CUDA 13 machine its `_C.so` needs libcudart.so.12
(pip install nvidia-cuda-runtime-cu12 and put its lib folder on LD_LIBRARY_PATH); without it every op
reports "xFormers wasn't built with CUDA support", so that case is `unavailable` with the fix named.

Documents (varlen masks) are `BlockDiagonalMask` / `BlockDiagonalCausalMask.from_seqlens` over the
batch packed into one row of batch * seqlen tokens.
FlashAttention-4 installs a `flash_attn` package too (`flash_attn.cute`, no FA2 interface). xFormers 0.0.35
imports `flash_attn.flash_attn_interface` whenever any `flash_attn` is importable, unguarded, so with FA4
installed `import xformers.ops` fails. `import_xformers` hides such a `flash_attn` while xFormers first
imports: xFormers then runs its fa2 op on PyTorch's own flash kernels, as it does without FA2 installed.

Causal is `LowerTriangularFromBottomRightMask` (our causal is bottom-right aligned; xFormers'
`LowerTriangularMask` is top-left, which differs when seqlen_q != seqlen_k). GQA uses xFormers' 5-D
BMGHK form: K/V are expanded (a view, no copy) across the query heads of each group.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path

from attnbench import masks
from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    Unsupported,
    compile_fn,
    cuda_missing,
    describe_exception,
    import_failure,
    mark_seq_dynamic,
    module_version,
)
from attnbench.rows import Workload

# our op key -> the xformers.ops.fmha submodule holding its FwOp/BwOp pair
OP_MODULES = {"cutlass": "cutlass", "fa2": "flash", "fa3": "flash3"}
CUDA12_HINT = (
    "the PyPI wheel is built against CUDA 12: pip install nvidia-cuda-runtime-cu12 and put "
    "its nvidia/cuda_runtime/lib folder on LD_LIBRARY_PATH"
)


def flash_attn_without_fa2() -> bool:
    """True when an importable `flash_attn` has no FlashAttention-2 interface (FA4's CuTe-only package).

    Looks for the file instead of importing it, so that asking does not import FA4."""
    try:
        spec = importlib.util.find_spec("flash_attn")
    except (ImportError, ValueError):  # a broken or half-imported package: xFormers' check fails too
        return False
    if spec is None:
        return False
    places = spec.submodule_search_locations or []
    return not any((Path(place) / "flash_attn_interface.py").exists() for place in places)


@contextmanager
def hidden_module(name: str):
    """`importlib.util.find_spec(name)` answers None inside; the module (if imported) is back afterwards."""
    missing = object()
    saved = sys.modules.get(name, missing)
    sys.modules[name] = None  # find_spec returns None for a None entry; `import name` raises
    try:
        yield
    finally:
        if saved is missing:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved


def import_xformers() -> None:
    """Import xformers.ops, hiding FA4's `flash_attn` from xFormers' unguarded FA2 import (see above)."""
    if "xformers.ops" in sys.modules or not flash_attn_without_fa2():
        importlib.import_module("xformers.ops")
        return
    with hidden_module("flash_attn"):
        importlib.import_module("xformers.ops")


def _memory_efficient_attention(q, k, v, attn_bias=None, op=None):
    """A Python-level function for torch.compile to trace."""
    import xformers.ops as xops

    return xops.memory_efficient_attention(q, k, v, attn_bias=attn_bias, op=op)


def _library_failure() -> str | None:
    """Why xFormers' compiled extension did not load (None when it did)."""
    try:
        from xformers import _cpp_lib
    except Exception as exc:  # noqa: BLE001
        return f"import failed: {describe_exception(exc)}"
    failure = getattr(_cpp_lib, "_cpp_library_load_exception", None)
    if failure is None:
        return None
    text = str(failure)
    hint = f" ({CUDA12_HINT})" if "libcudart.so.12" in text or "cuda" in text.lower() else ""
    return f"xformers C++/CUDA extension failed to load: {text.strip().splitlines()[0][:300]}{hint}"


class XFormers(Provider):
    family = "xformers"
    hue = "#d62728"
    install = "pip install xformers (on CUDA 13 also nvidia-cuda-runtime-cu12, see above)"
    layout = "bshd"
    dtypes = ("bfloat16", "float16", "float32")
    mask_features = ("causal", "window", "documents")
    gqa = True
    backward = True

    def __init__(self, name: str, *, op: str | None = None, compiled: bool = False):
        if op is not None and op not in OP_MODULES:
            raise ValueError(f"unknown xFormers op {op!r}; choose one of {sorted(OP_MODULES)}")
        self.name = name
        self.op = op
        self.compiled = compiled

    def ops(self):
        """(FwOp, BwOp) of the pinned op, or None for the dispatcher."""
        if self.op is None:
            return None
        module = importlib.import_module(f"xformers.ops.fmha.{OP_MODULES[self.op]}")
        return module.FwOp, module.BwOp

    def unavailable(self) -> str | None:
        # the reason is that of xFormers' own import, FA4's flash_attn hidden (a plain import of
        # xformers.ops would fail first on flash_attn.flash_attn_interface and hide the real cause)
        missing = import_failure("xformers.ops", self.install, importer=lambda _: import_xformers())
        if missing and "libcudart.so.12" in missing:
            missing += f" ({CUDA12_HINT})"
        missing = missing or cuda_missing() or _library_failure()
        if missing or self.op is None:
            return missing
        try:
            fw, bw = self.ops()
        except Exception as exc:  # noqa: BLE001
            return f"xformers.ops.fmha.{OP_MODULES[self.op]} failed to import: {describe_exception(exc)}"
        missing_ops = [op.NAME for op in (fw, bw) if not op.is_available()]
        if missing_ops:
            why = ""
            if self.op == "fa3":
                why = (
                    " (xFormers' fa3F/fa3B call the flash_attn_3 package's ops: install FlashAttention-3, "
                    "built from flash-attention's hopper/ folder, with an op schema this xFormers accepts)"
                )
            return f"{', '.join(missing_ops)} not available in xformers {self.version()}{why}"
        return None

    def version(self) -> str:
        return module_version("xformers")

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        from xformers.ops.fmha import attn_bias
        from xformers.ops.fmha.common import Inputs

        bias = _attn_bias(attn_bias, workload, q.device)
        b, hq, sq, d = q.shape
        hkv = k.shape[1]
        q, k, v = (t.detach().transpose(1, 2).contiguous().requires_grad_(backward) for t in (q, k, v))
        groups = hq // hkv
        # block-diagonal (document) biases take the whole batch as one row of b * sq tokens
        rows, sq_row = (1, b * sq) if getattr(masks.native(workload), "doc_lens", None) else (b, sq)
        args = tuple(t.view(rows, sq_row, t.shape[2], d) for t in (q, k, v))
        if groups > 1:  # BMGHK: [b, s, hkv, groups, d]; K/V broadcast over each group (views, no copies)
            args = (
                args[0].view(rows, sq_row, hkv, groups, d),
                args[1].unsqueeze(3).expand(-1, -1, -1, groups, -1),
                args[2].unsqueeze(3).expand(-1, -1, -1, groups, -1),
            )
        inputs = Inputs(query=args[0], key=args[1], value=args[2], attn_bias=bias)
        ops = self.ops()
        note = "GQA via BMGHK expand; " if groups > 1 else ""
        if ops is None:
            refused = _dispatch_refuses(inputs, backward)
            if refused:
                raise Unsupported(refused)
            note += f"dispatch picked {_dispatched(inputs, backward)}"
        else:
            reasons = ops[0].not_supported_reasons(inputs)
            if backward:
                reasons += [f"backward: {r}" for r in ops[1].not_supported_reasons(inputs)]
            if reasons:
                raise Unsupported(f"{ops[0].NAME}: " + "; ".join(reasons))
            note += f"op pinned: {ops[0].NAME}" + (f" / {ops[1].NAME}" if backward else "")
        attention = _memory_efficient_attention
        if self.compiled:
            attention = compile_fn(_memory_efficient_attention)
            mark_seq_dynamic(args, 1)

        def run():
            return attention(*args, attn_bias=bias, op=ops).reshape(b, sq, hq, d)

        return Prepared(
            run=run, to_canonical=lambda out: out.transpose(1, 2), inputs=(q, k, v), note=note.strip("; ")
        )


def _attn_bias(attn_bias, workload: Workload, device=None):
    """The xFormers attn_bias of the workload's mask (None: no mask); Unsupported when there is none."""
    native = masks.native(workload)
    if native is None:
        raise Unsupported(f"xFormers has no attn_bias type for mask {workload.mask}")
    if native.doc_lens:
        if native.window is not None:
            raise Unsupported("documents with a window are not mapped to an xFormers attn_bias")
        seqlens = list(native.doc_lens) * workload.batch
        kind = attn_bias.BlockDiagonalCausalMask if native.causal else attn_bias.BlockDiagonalMask
        try:  # newer xFormers build the sequence starts on the device given (else on the CPU)
            return kind.from_seqlens(seqlens, device=device)
        except TypeError:
            return kind.from_seqlens(seqlens)
    if native.window is not None:
        return attn_bias.LowerTriangularFromBottomRightLocalAttentionMask(native.window)
    return attn_bias.LowerTriangularFromBottomRightMask() if native.causal else None


def _dispatch_refuses(inputs, backward: bool) -> str | None:
    """xFormers' own words when no op of this install takes these inputs (e.g. no backward for BMGHK)."""
    from xformers.ops.fmha import dispatch

    try:
        forward_op = dispatch._dispatch_fw(inputs, backward)
        if backward:
            # varlen biases: the backward must read the LSE in the format the forward op wrote it
            dispatch._dispatch_bw(inputs, forward_op.VARLEN_LSE_PACKED)
    except NotImplementedError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        why = [line for line in lines[1:] if line.startswith(("`", "-", "*")) or "not supported" in line]
        return f"{lines[0] if lines else 'no operator'}: " + "; ".join(why[:6])[:600]
    except Exception:  # noqa: BLE001 - a private API: if it cannot be asked, let the call itself tell
        return None
    return None


def _dispatched(inputs, backward: bool) -> str:
    """The op names xFormers' dispatcher chooses for these inputs (what the timed call runs)."""
    try:
        from xformers.ops.fmha import dispatch

        forward_op = dispatch._dispatch_fw(inputs, backward)
        names = [forward_op.NAME]
        if backward:
            names.append(dispatch._dispatch_bw(inputs, forward_op.VARLEN_LSE_PACKED).NAME)
        return " / ".join(names)
    except Exception as exc:  # noqa: BLE001 - a private API: say we could not tell, never fail the row
        return f"(could not ask the dispatcher: {describe_exception(exc)})"
