"""Device side, after scripts/carry/device.sh and `source scripts/carry/env.sh`: does each carried library
load, and what do the attnbench providers say? One line each; never raises."""

import importlib
import importlib.metadata as md
import sys
import warnings

warnings.filterwarnings("ignore")
for module, dist in (
    ("transformer_engine.pytorch", "transformer_engine"),
    ("flash_attn.cute", "flash-attn-4"),
    ("magi_attention.api", None),
    ("flashinfer", "flashinfer-python"),
    ("flash_attn_interface", "flash_attn_3"),
):
    try:
        mod = importlib.import_module(module)
        version = md.version(dist) if dist else getattr(sys.modules[module.split(".")[0]], "__version__", "")
        print(f"ok   {module} {version} ({getattr(mod, '__file__', '')})")
    except Exception as exc:  # noqa: BLE001 - report every library, whatever fails
        print(f"FAIL {module}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
try:
    from attnbench.bench import providers

    for p in providers.all_providers():
        if p.family in ("te", "flash_attn4", "magi_ffa", "flashinfer"):
            print(f"provider {p.name}: {p.unavailable() or 'available ' + p.version()}")
except Exception as exc:  # noqa: BLE001
    print(f"attnbench providers: {type(exc).__name__}: {exc}")
