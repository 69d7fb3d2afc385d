"""The mask registry moved to `attnbench.masks` (one file per mask); this name stays an alias of it so
`from attnbench.bench import masks` keeps working and both names are one module object."""

import sys

from attnbench import masks as _masks

sys.modules[__name__] = _masks
