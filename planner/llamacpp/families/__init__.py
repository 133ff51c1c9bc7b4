"""One module per llama.cpp model family, mirroring llama.cpp's ``src/models/``: each
registers a :class:`~planner.llamacpp.graph.Family` under the architecture names it
serves, with the traits, reading and building its graph needs beyond the generic block.

Every module of this package is imported here, so a new family is one new file (see
docs/llamacpp.md, "Adding an architecture").
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
