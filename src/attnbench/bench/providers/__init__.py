"""The provider registry: one line per provider. A new provider is one module plus one line here.

Listing it imports no third-party library: each provider imports its library only when asked whether
it is available or to prepare a call.
"""

from __future__ import annotations

from attnbench.bench.providers.base import Prepared, Provider, Unsupported
from attnbench.bench.providers.cudnn_frontend import CudnnFrontend, CudnnFrontendFp8
from attnbench.bench.providers.flash_attn import FlashAttn2
from attnbench.bench.providers.flash_attn3 import FlashAttn3, FlashAttn3Fp8
from attnbench.bench.providers.flash_attn4 import FlashAttn4
from attnbench.bench.providers.flashinfer_prefill import FlashInferPrefill
from attnbench.bench.providers.flex import FlexAttention
from attnbench.bench.providers.hf_kernels import HfKernel
from attnbench.bench.providers.magi_ffa import MagiFFA
from attnbench.bench.providers.sage import SageProvider, SageVarlen
from attnbench.bench.providers.sdpa import SdpaProvider
from attnbench.bench.providers.te import TransformerEngine
from attnbench.bench.providers.te_backends import TransformerEngineBackend
from attnbench.bench.providers.triton_fa2 import TritonFlashAttention2
from attnbench.bench.providers.xformers import XFormers

__all__ = ["Prepared", "Provider", "Unsupported", "all_providers", "families", "family_hues", "get", "select"]

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
    FlashAttn4("flash_attn4_compiled", compiled=True),
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
    TransformerEngineBackend("te_flash", "flash"),
    TransformerEngineBackend("te_fused", "fused"),
    TransformerEngineBackend("te_unfused", "unfused"),
    MagiFFA("magi_ffa"),  # disable_fwd_atomic_reduction=True (q_ranges never overlap here)
    MagiFFA("magi_ffa_default", no_fwd_atomic=False),  # the library's defaults
    FlashInferPrefill("flashinfer"),
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
    """Unique names; one hue per family, and no two families sharing a hue (figures tell them apart)."""
    seen: set[str] = set()
    hue_of: dict[str, str] = {}
    for provider in providers:
        if not provider.name or not provider.family or not provider.hue:
            raise ValueError(f"{provider!r} has no name, family or hue")
        if provider.name in seen:
            raise ValueError(f"provider name {provider.name!r} registered twice")
        seen.add(provider.name)
        if hue_of.setdefault(provider.family, provider.hue) != provider.hue:
            raise ValueError(
                f"family {provider.family!r} has two hues: {hue_of[provider.family]}, {provider.hue}"
            )
    owners: dict[str, str] = {}
    for family, hue in hue_of.items():
        if owners.setdefault(hue.lower(), family) != family:
            raise ValueError(f"families {owners[hue.lower()]!r} and {family!r} share the hue {hue}")


_check_unique(_REGISTRY)


def all_providers() -> list[Provider]:
    """Every registered provider, in registry order (available or not)."""
    return list(_REGISTRY)


def families() -> list[str]:
    return list(dict.fromkeys(p.family for p in _REGISTRY))


def family_hues() -> dict[str, str]:
    """{family: its hue}, in registry order (what report figures colour lines by)."""
    return {p.family: p.hue for p in _REGISTRY}


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
