"""What every attention provider declares and does.

A provider takes canonical inputs (q, k, v as [batch, heads, seq, head_dim] tensors on the device),
converts them once to its native layout (`prepare`, outside the timed region) and returns a callable
that runs exactly one attention forward on those native inputs. The sweep (bench/sweep.py) times that
callable, checks its output against the fp32 reference and turns everything into Result rows.

Rules: `unavailable()` and `unsupported()` return a reason string (or None) and never raise; a provider
that cannot import or load says why there, so it becomes a row, never a crash and never silently absent.
`prepare()` may raise `Unsupported(reason)` when only the library itself can tell (e.g. SDPA's own
kernel checks on the actual tensors); the sweep records that as an `unsupported` row, not an error.
Third-party libraries are imported lazily, inside methods, so listing the registry stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnbench import masks
from attnbench.rows import Workload


class Unsupported(Exception):
    """prepare() found that this provider cannot run these inputs; the message is the reason."""


@dataclass
class Prepared:
    """Native-layout inputs bound to one call. `run()` is what gets timed."""

    run: Callable[[], Any]  # one forward; returns the output in native layout
    to_canonical: Callable[[Any], Any]  # native output -> [batch, heads_q, seq_q, head_dim] tensor
    inputs: tuple = ()  # native leaf tensors (q, k, v); requires_grad is set when prepared with backward=True
    note: str = ""  # anything a reader should know about this call (e.g. "k/v expanded for GQA")
    # native gradient -> canonical [b, h, s, d] (name, grad, canonical tensor); None: by Provider.layout
    grad_to_canonical: Callable[[str, Any, Any], Any] | None = None


class Provider:
    name: str = ""  # unique, e.g. "sdpa_cudnn"
    family: str = ""  # module family, e.g. "sdpa"
    hue: str = ""  # the family's colour ("#rrggbb") in every figure; each provider is a shade of it
    layout: str = "bhsd"  # native layout: bhsd | bshd | sbhd | thd (packed varlen)
    dtypes: tuple[str, ...] = ("bfloat16", "float16")
    # Kernel features for masks (masks.FEATURES: "causal", "window", "documents", "block_causal", or
    # "mask_mod" for any mask); which masks it runs is derived from these (`supported_masks`).
    mask_features: tuple[str, ...] = ("causal",)
    gqa: bool = False  # accepts heads_kv < heads_q without repeating K/V
    backward: bool = False
    quantized: bool = False  # computes in lower precision on purpose (judged with looser tolerances)
    tolerance: str | None = None  # a correctness.TOLERANCES entry of its own (e.g. an fp8 output), if any
    needs_cuda: bool = True
    compiled: bool = False  # setup includes torch.compile
    install: str = ""  # what a user with network runs to get this provider (named in "not installed" rows)
    head_dims: tuple[int, ...] | None = None  # None: any head_dim the library accepts
    causal_any_lengths: bool = True  # False: causal (and windows) only when seqlen_q == seqlen_k
    stands_in_for: str = ""  # a labelled variant (e.g. K/V repeated) of this provider, for where it refuses

    def unavailable(self) -> str | None:
        """Why this provider cannot run on this machine at all (not installed, import fails, no GPU)."""
        return cuda_missing() if self.needs_cuda else None

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        """Why this provider cannot run this workload/pass, from its declared capabilities."""
        if workload.dtype not in self.dtypes:
            return f"dtype {workload.dtype} not supported (supports {', '.join(self.dtypes)})"
        reason = self.mask_gap(workload.mask)
        if reason:
            return reason
        if workload.gqa and not self.gqa:
            return "GQA (heads_kv < heads_q) not supported"
        if pass_ != "fwd" and not self.backward:
            return "no backward"
        if self.head_dims is not None and workload.head_dim not in self.head_dims:
            return f"head_dim {workload.head_dim} not supported (supports {self.head_dims})"
        native = masks.native(workload)
        if (
            not self.causal_any_lengths
            and native is not None
            and native.causal
            and workload.seqlen_q != workload.seqlen_k
        ):
            return f"{workload.mask} with seqlen_q != seqlen_k: this kernel's alignment is not bottom-right"
        return None

    def supported_masks(self) -> tuple[str, ...]:
        """Every registered mask this provider's mask features run (derived, never listed by hand)."""
        return tuple(name for name, mask in masks.REGISTRY.items() if not mask.missing(self.mask_features))

    def mask_gap(self, mask_name: str) -> str | None:
        """Why this provider cannot run the mask, naming the kernel features it lacks (None: it can)."""
        missing = masks.get(mask_name).missing(self.mask_features)
        if not missing:
            return None
        lacking = "; ".join(f"{feature} ({masks.FEATURES[feature]})" for feature in missing)
        return f"mask {mask_name} not supported: needs {lacking}, which {self.name} does not declare"

    def why_not(self, workload: Workload, pass_: str) -> tuple[str, str] | None:
        """(status, reason) when this provider cannot run the workload, else None."""
        reason = self.unavailable()
        if reason:
            return "unavailable", reason
        reason = self.unsupported(workload, pass_)
        return ("unsupported", reason) if reason else None

    def version(self) -> str:
        return ""

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        """Native inputs (leaf tensors, requires_grad=backward) and the call to time."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


# --- helpers shared by the provider modules -------------------------------------------------------


def describe_exception(exc: BaseException) -> str:
    """`ExcType: first line of the message`, the form every reason uses, followed by the exception
    it was raised from (`__cause__`, or the one being handled, `__context__`) when there is one: a
    wrapper's first line ("backend='inductor' raised", "could not verify publisher") says little."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    seen = {id(exc)}
    while inner is not None and id(inner) not in seen and len(seen) < 4:
        seen.add(id(inner))
        inner_lines = str(inner).strip().splitlines()
        text += f" (from {type(inner).__name__}: {inner_lines[0][:300] if inner_lines else ''})"
        inner = inner.__cause__ or (None if inner.__suppress_context__ else inner.__context__)
    return text


def import_failure(module: str, install: str = "", importer=importlib.import_module) -> str | None:
    """None if `module` imports; else why not, and what to do about it.

    "not installed (no module 'x')" plus `install` (the command a user with network runs) and this
    machine's note from ATTNBENCH_PROVIDER_NOTES, if any (see `machine_note`); "import failed: <why>"
    when it is installed but does not load. `importer(module)` imports it (a provider that must import
    its library a particular way passes its own, so the reason is that import's failure).
    """
    try:
        importer(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing == module or module.startswith(missing + ".") or not missing:
            reason = f"not installed (no module {missing or module!r})"
            if install:
                reason += f"; to install: {install}"
            note = machine_note(module)
            return f"{reason}; on this machine: {note}" if note else reason
        return f"import failed: {describe_exception(exc)}"
    except Exception as exc:  # noqa: BLE001 - any failure to import is a reason, never a crash
        return f"import failed: {describe_exception(exc)}"
    return None


def machine_note(module: str) -> str:
    """Why a module is absent on this particular machine, from the YAML file named by
    ATTNBENCH_PROVIDER_NOTES ({module or top-level package: note}); e.g. scripts/device_run.sh points it at
    scripts/gpu_machine_notes.yaml (what cannot be carried to our air-gapped GPU machine, and why)."""
    import os

    path = os.environ.get("ATTNBENCH_PROVIDER_NOTES")
    if not path:
        return ""
    try:
        import yaml

        with open(path) as f:
            notes = yaml.safe_load(f) or {}
    except Exception as exc:  # noqa: BLE001 - a missing or malformed notes file is a note, never a crash
        return f"(ATTNBENCH_PROVIDER_NOTES={path} unreadable: {describe_exception(exc)})"
    if not isinstance(notes, dict):
        return f"(ATTNBENCH_PROVIDER_NOTES={path} unreadable: not a mapping of module names to notes)"
    note = notes.get(module) or notes.get(module.split(".")[0])  # the module itself, else its package
    return str(note).strip() if note else ""


def cuda_missing() -> str | None:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return f"torch import failed: {describe_exception(exc)}"
    return None if torch.cuda.is_available() else "needs CUDA (no CUDA device visible)"


def module_version(module: str) -> str:
    try:
        mod = importlib.import_module(module)
    except Exception:  # noqa: BLE001
        return ""
    version = getattr(mod, "__version__", "")
    if version:
        return str(version)
    try:
        from importlib.metadata import version as dist_version

        return dist_version(module.split(".")[0].replace("_", "-"))
    except Exception:  # noqa: BLE001
        return ""


def leaf(x, backward: bool):
    """A leaf tensor sharing x's storage (no copy), with requires_grad as the pass needs."""
    return x.detach().requires_grad_(backward)


def to_bshd(x, backward: bool):
    """[b, h, s, d] -> contiguous [b, s, h, d] leaf (made once, before timing)."""
    return x.detach().transpose(1, 2).contiguous().requires_grad_(backward)


def bshd_to_canonical(out):
    return out.transpose(1, 2)


_COMPILED: dict[tuple, Callable] = {}


def compile_fn(fn, *, mode: str | None = None, fullgraph: bool = False):
    """One torch.compile wrapper per (function, mode, fullgraph) for the whole process.

    Callers mark the sequence dimension dynamic (`mark_seq_dynamic`), so a sweep over sequence lengths
    compiles once per pass and mask instead of once per shape: the first prepare's first call pays the
    compile (its setup_ms), later shapes reuse the graph. The recompile limit is raised and hitting it
    is made an error: by default dynamo would silently fall back to eager, which would then be timed
    as if it were compiled. `fullgraph=True` also makes a graph break an error instead of a silent
    split into eager pieces.
    """
    key = (fn, mode, fullgraph)
    if key not in _COMPILED:
        import torch

        _configure_dynamo(torch)
        _COMPILED[key] = torch.compile(fn, mode=mode, fullgraph=fullgraph)
    return _COMPILED[key]


def _configure_dynamo(torch) -> None:
    # The backward pass is timed as repeated autograd.grad(..., retain_graph=True) on one forward;
    # AOTAutograd's donated buffers forbid retain_graph, so they are turned off (a compiled model's
    # training step, which frees its graph, would donate them: a small effect on memory, not time).
    try:
        torch._functorch.config.donated_buffer = False
    except AttributeError:
        pass
    config = torch._dynamo.config
    for name, value in (
        ("recompile_limit", 64),
        ("cache_size_limit", 64),
        ("fail_on_recompile_limit_hit", True),
        ("fail_on_cache_limit_hit", True),
    ):
        try:
            if isinstance(value, bool) or getattr(config, name) < value:
                setattr(config, name, value)
        except (AttributeError, KeyError):  # names differ across torch versions
            continue


def mark_seq_dynamic(tensors, dim: int) -> None:
    """Let dynamo treat dimension `dim` (the sequence) as dynamic, if the graph allows it."""
    import torch

    for t in tensors:
        torch._dynamo.maybe_mark_dynamic(t, dim)
