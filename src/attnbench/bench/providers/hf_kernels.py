"""FlashAttention builds from the Hugging Face Hub through the `kernels` package.

`get_kernel(repo, version=N)` downloads a prebuilt kernel for this torch/CUDA (or finds it in the local
HF cache). kernels >= 0.15 refuses a Hub kernel without `version=` (a major version: the kernel's
API is stable within it) or `revision=`, so every provider names its major version. On a machine
without network and without a cached copy the download fails; that failure, with the repo id and the
library's own message, is the `unavailable` reason. The loaded module is cached per process.
"""

from __future__ import annotations

from attnbench.bench.providers.base import cuda_missing, describe_exception, import_failure, module_version
from attnbench.bench.providers.flash_attn import FlashStyleProvider

_LOADED: dict[str, object] = {}  # repo id -> loaded module, or the exception that stopped it


class HfKernel(FlashStyleProvider):
    family = "hf_kernels"
    hue = "#17becf"
    module = "kernels"

    def __init__(self, name: str, repo: str, *, version: int = 1, compiled: bool = False):
        super().__init__(name, compiled=compiled)
        self.repo = repo
        self.kernel_version = version

    def _call(self) -> str:
        return f"get_kernel({self.repo!r}, version={self.kernel_version})"

    def _module(self):
        if self.repo not in _LOADED:
            try:
                from kernels import get_kernel

                _LOADED[self.repo] = get_kernel(self.repo, version=self.kernel_version)
            except Exception as exc:  # noqa: BLE001 - kept, then reported as the reason
                _LOADED[self.repo] = exc
        loaded = _LOADED[self.repo]
        if isinstance(loaded, Exception):
            raise loaded
        return loaded

    def load(self):
        module = self._module()
        if not hasattr(module, self.function):
            public = sorted(n for n in dir(module) if not n.startswith("_"))
            raise AttributeError(
                f"{self.repo} has no {self.function} (it has: {', '.join(public[:8]) or 'nothing'}"
                f"{', ...' if len(public) > 8 else ''})"
            )
        return getattr(module, self.function)

    def unavailable(self) -> str | None:
        missing = import_failure("kernels")
        if missing:
            # the package alone is not enough: get_kernel() then fetches a build from the Hub
            return (
                f"{missing}: pip install kernels; then {self._call()} downloads a prebuilt kernel from "
                "the Hugging Face Hub (needs network, or a copy in the local HF cache: run it once online)"
            )
        missing = cuda_missing()
        if missing:
            return missing
        try:
            self.load()
        except AttributeError as exc:
            return f"loaded {self.repo}, but {exc}"
        except Exception as exc:  # noqa: BLE001
            hint = ""
            text = describe_exception(exc).lower()
            if any(
                word in text
                for word in (
                    "connect",
                    "offline",
                    "network",
                    "resolve",
                    "local cache",
                    "timed out",
                    "localentrynotfound",
                    "could not verify publisher",  # kernels asks the Hub whether the publisher is trusted
                )
            ):
                hint = (
                    " (the Hugging Face Hub cannot be reached and no copy is cached: run it once on a "
                    "machine with network, or copy ~/.cache/huggingface/hub over)"
                )
            return f"{self._call()} failed{hint}: {describe_exception(exc)}"
        return None

    def version(self) -> str:
        kernels_version = module_version("kernels")
        return f"kernels {kernels_version}, {self.repo} v{self.kernel_version}" if kernels_version else ""
