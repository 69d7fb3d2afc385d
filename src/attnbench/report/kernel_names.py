"""Device-kernel names a reader can take in at a glance.

A profiler names a CUDA kernel by its demangled C++ signature: PyTorch's element-wise kernels run to
hundreds of characters of lambdas and offset calculators, and cutting them at a fixed width leaves
`void at::native::unrolled_elementwise_kernel<at::` with the part that says what it does cut off. The
short name keeps the kernel's own name and what its template was instantiated for:
`unrolled_elementwise_kernel<direct_copy_kernel_cuda>`, `vectorized_elementwise_kernel<MulFunctor>`,
`device_kernel<FlashAttnFwdSm90>`.
"""

from __future__ import annotations

import re

_CONTAINERS = {"array", "tuple", "pair", "vector"}
_OPERATION_CALL = re.compile(r"\b(\w+_kernel(?:_cuda)?)\s*\(")  # at::native::direct_copy_kernel_cuda(...)
_STD_FUNCTOR = re.compile(r"\bstd::(\w+)<")  # std::divides<float>
_FUNCTOR = re.compile(r"\b(\w+Functor)\b")  # BinaryFunctor<..., MulFunctor<float> >: the innermost tells
_FIRST_TYPE = re.compile(r"^\s*(?:[\w]+::)*(\w+)")  # cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>


def _template_arguments(text: str, start: int) -> str:
    """The text between the `<` at `start` and its matching `>` (to the end if it never closes)."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"<": 1, ">": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i]
    return text[start + 1 :]


def _instantiated_for(arguments: str, base: str) -> str | None:
    calls = [m for m in _OPERATION_CALL.findall(arguments) if m != base]
    if calls:
        return calls[0]
    std = [m for m in _STD_FUNCTOR.findall(arguments) if m not in _CONTAINERS]
    if std:
        return std[0]
    functors = _FUNCTOR.findall(arguments)
    if functors:
        return functors[-1]
    first = _FIRST_TYPE.match(arguments)
    return first.group(1) if first and not first.group(1).isdigit() else None


def short_kernel_name(name: str, width: int = 60) -> str:
    """`name` without return type, namespaces, template arguments and parameters, followed by what its
    template was instantiated for where that can be read; at most `width` characters. A name that is
    words rather than a signature ("Memcpy HtoD (Pageable -> Device)") is kept whole."""
    text = " ".join(str(name).split()).replace("(anonymous namespace)::", "")
    text = text.removeprefix("void ").removeprefix("__global__ ")
    cut = min((i for i in (text.find("<"), text.find("(")) if i >= 0), default=len(text))
    if " " in text[:cut]:  # a signature has no space before its "<" or "(" once "void " is gone
        return _within(text, width)
    base = text[:cut].rsplit("::", 1)[-1] or text[:cut]
    operation = (
        _instantiated_for(_template_arguments(text, cut), base) if text[cut : cut + 1] == "<" else None
    )
    return _within(f"{base}<{operation}>" if operation else base, width)


def _within(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
