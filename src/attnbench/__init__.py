"""attnbench: reproducible attention-benchmark reports.

Cells import this package, so it imports nothing heavy: `inputs()` (the notebook engine's, light) is
all that lives here.
"""

from __future__ import annotations

from attnbench.notebook.run.inputs import inputs

__version__ = "0.1.0"
__all__ = ["__version__", "inputs"]
