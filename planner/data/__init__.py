"""Data shipped with the planner: model presets (``models/``), the GPU catalog
(``gpus.toml``), example fleet files (``fleets/``) and the fence checker's saved results
(``fence_check.json``).

The repository's top-level ``data/`` is this folder. Read it through
:func:`planner.models.data_dir`, which finds it the same way in a checkout and in an
installed wheel.
"""
