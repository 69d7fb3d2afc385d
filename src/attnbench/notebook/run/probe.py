"""What an interpreter has: python, torch and its CUDA, and the versions of named distributions.

Standard library only, and plain enough for any Python 3: machine.probe_interpreter() runs this
file's text in the target interpreter (`python -c`), or calls probe() directly when the target is
the interpreter running attnbench. Versions come from package metadata; torch's CUDA version from
torch/version.py as text, because importing torch costs seconds.
"""

import importlib.metadata as md
import importlib.util
import os
import platform
import re
import sys


def _version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _torch_version_file():
    """(torch version, CUDA version) read from torch/version.py, without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
        if not (spec and spec.submodule_search_locations):
            return None, None
        with open(os.path.join(next(iter(spec.submodule_search_locations)), "version.py")) as f:
            text = f.read()
    except (ImportError, ValueError, OSError):  # a broken torch install: no versions, no crash
        return None, None
    # annotated or not: `cuda: Optional[str] = '13.0'`
    cuda = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)", text, re.MULTILINE)
    torch = re.search(r"^__version__\b[^=\n]*=\s*['\"]([^'\"]+)", text, re.MULTILINE)
    return (torch.group(1) if torch else None), (cuda.group(1) if cuda else None)


def probe(names):
    file_torch, cuda = _torch_version_file()
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "torch": _version("torch") or file_torch,
        "cuda": cuda,
        "markers": {
            "python_version": "{}.{}".format(*sys.version_info[:2]),
            "python_full_version": platform.python_version(),
            "sys_platform": sys.platform,
            "platform_machine": platform.machine(),
            "platform_system": platform.system(),
            "os_name": os.name,
            "implementation_name": sys.implementation.name,
        },
        "dists": {name: _version(name) for name in names},
    }
