"""The provider registry: one line per provider. A new provider is one module plus one line here.

Listing it imports no third-party library: each provider imports its library only when asked whether
it is available or to prepare a call.
"""

from __future__ import annotations

from attnbench.bench.providers.base import Prepared, Provider, Unsupported
from attnbench.bench.providers.cudnn_frontend import CudnnFrontend, CudnnFrontendFp8
from attnbench.bench.providers.flash_attn import FlashAttn2, FlashAttn4
from attnbench.bench.providers.flash_attn3 import FlashAttn3, FlashAttn3Fp8
from attnbench.bench.providers.flex import FlexAttention
from attnbench.bench.providers.hf_kernels import HfKernel
from attnbench.bench.providers.sage import SageProvider, SageVarlen
from attnbench.bench.providers.sdpa import SdpaProvider
from attnbench.bench.providers.te import TransformerEngine
from attnbench.bench.providers.triton_fa2 import TritonFlashAttention2
from attnbench.bench.providers.xformers import XFormers

__all__ = ["Prepared", "Provider", "Unsupported", "all_providers", "families", "get", "select"]

_REGISTRY: list[Provider] = [
    SdpaProvider("sdpa_flash", "FLASH_ATTENTION"),
    SdpaProvider("sdpa_efficient", "EFFICIENT_ATTENTION"),
    SdpaProvider("sdpa_cudnn", "CUDNN_ATTENTION"),
    SdpaProvider("sdpa_math", "MATH"),
    SdpaProvider("sdpa_cudnn_kv_repeated", "CUDNN_ATTENTION", repeat_kv=True),
    SdpaProvider("sdpa_efficient_kv_repeated", "EFFICIENT_ATTENTION", repeat_kv=True),
    SdpaProvider("sdpa_compiled", "", compiled=True),
    SdpaProvider("sdpa_compiled_max_autotune", "", compiled=True, compile_mode="max-autotune"),
    CudnnFrontend("cudnn_frontend"),
    CudnnFrontendFp8("cudnn_frontend_fp8"),
    FlexAttention("flex", compiled=True),
    FlexAttention("flex_eager", compiled=False),
    FlashAttn2("flash_attn2"),
    FlashAttn2("flash_attn2_compiled", compiled=True),
    FlashAttn3("flash_attn3"),
    FlashAttn3("flash_attn3_compiled", compiled=True),
    FlashAttn3Fp8("flash_attn3_fp8"),
    FlashAttn4("flash_attn4"),
    HfKernel("hf_flash_attn", "kernels-community/flash-attn"),
    HfKernel("hf_flash_attn3", "kernels-community/flash-attn3"),
    SageProvider("sage_sageattn", "sageattn"),
    SageProvider("sage_sageattn_nhd", "sageattn", layout="bshd"),
    SageVarlen("sage_sageattn_varlen"),
    SageProvider("sage_qk_int8_pv_fp16_triton", "sageattn_qk_int8_pv_fp16_triton"),
    SageProvider("sage_qk_int8_pv_fp16_cuda", "sageattn_qk_int8_pv_fp16_cuda"),
    SageProvider("sage_qk_int8_pv_fp8_cuda", "sageattn_qk_int8_pv_fp8_cuda"),
    SageProvider("sage_qk_int8_pv_fp8_cuda_sm90", "sageattn_qk_int8_pv_fp8_cuda_sm90"),
    TransformerEngine("te_bshd", "bshd"),
    TransformerEngine("te_sbhd", "sbhd"),
    XFormers("xformers"),
    XFormers("xformers_compiled", compiled=True),
    XFormers("xformers_cutlass", op="cutlass"),
    XFormers("xformers_cutlass_compiled", op="cutlass", compiled=True),
    XFormers("xformers_fa2", op="fa2"),
    XFormers("xformers_fa2_compiled", op="fa2", compiled=True),
    XFormers("xformers_fa3", op="fa3"),
    XFormers("xformers_fa3_compiled", op="fa3", compiled=True),
    TritonFlashAttention2("triton_fa2"),
    TritonFlashAttention2("triton_fa2_ieee", input_precision="ieee"),
]


def _check_unique(providers: list[Provider]) -> None:
    seen: set[str] = set()
    for provider in providers:
        if not provider.name or not provider.family:
            raise ValueError(f"{provider!r} has no name or family")
        if provider.name in seen:
            raise ValueError(f"provider name {provider.name!r} registered twice")
        seen.add(provider.name)


_check_unique(_REGISTRY)


def all_providers() -> list[Provider]:
    """Every registered provider, in registry order (available or not)."""
    return list(_REGISTRY)


def families() -> list[str]:
    return list(dict.fromkeys(p.family for p in _REGISTRY))


def get(name: str) -> Provider:
    for provider in _REGISTRY:
        if provider.name == name:
            return provider
    raise KeyError(f"no provider {name!r}; known: {', '.join(p.name for p in _REGISTRY)}")


def select(names_or_families: list[str] | None = None) -> list[Provider]:
    """Providers by name or family (None or [] = all); an unknown entry is an error naming it."""
    if not names_or_families:
        return all_providers()
    chosen: list[Provider] = []
    for entry in names_or_families:
        matches = [p for p in _REGISTRY if entry in (p.name, p.family)]
        if not matches:
            raise KeyError(f"no provider or family {entry!r}; families: {', '.join(families())}")
        chosen += [p for p in matches if p not in chosen]
    return chosen
