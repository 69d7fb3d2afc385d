"""FlashAttention 3 (Hopper), `flash_attn_interface.flash_attn_func`, plain and under torch.compile."""

from __future__ import annotations

from attnbench.bench.providers.base import module_version
from attnbench.bench.providers.flash_attn import FlashStyleProvider


class FlashAttn3(FlashStyleProvider):
    family = "flash_attn3"
    module = "flash_attn_interface"
    head_dims = (64, 96, 128, 192, 256)  # the head dims FA3 builds kernels for

    def version(self) -> str:
        # the module has no __version__; the distribution is "flash-attn-3" (or "flash_attn_3")
        from importlib.metadata import PackageNotFoundError, version

        for dist in ("flash-attn-3", "flash_attn_3", "flashattn-hopper"):
            try:
                return version(dist)
            except PackageNotFoundError:
                continue
        return module_version(self.module)
