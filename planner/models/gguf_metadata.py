"""The one reader of a model's ``{architecture}.*`` GGUF metadata: every value the planner
takes from those keys (the KV cache's layer rules, the compute graph's shape, the layout
llama.cpp gives the model) is read here, checked for its type and bounds, and refused by
name otherwise.

A refusal is a :class:`~planner.models.spec.ModelError`: ``MissingGgufKey`` for a key that
must be there, ``InvalidGguf`` for a value of the wrong type or out of its bounds, naming
the file, the key, the bound and the value. Counts are integers (``bool`` and floats are
refused, as llama.cpp's typed getters refuse them) between their bounds; llama.cpp reads
them into 32-bit fields, so none exceeds :data:`MAX_COUNT`. A per-layer key is either one
value for every layer or an array of exactly one value per layer
(``llama_model_loader::get_key_or_arr``). Keys that drive how much the estimate builds
(experts used, residual streams, cycles) carry tighter bounds where they are read.

The reader remembers every key it was asked for (:attr:`GgufMetadata.asked`), so the
tests can try hostile values in exactly the fields each architecture reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from planner._validate import shown
from planner.models.spec import ModelError

MAX_COUNT = 2**32 - 1
"""The largest count or width a GGUF key may hold: llama.cpp keeps them in ``uint32_t``."""


class GgufMetadata:
    """Checked access to one model's ``{architecture}.*`` keys (``where`` names the file
    in messages; ``layer_count`` is the length of a per-layer array)."""

    def __init__(self, metadata: Mapping[str, Any], architecture: str, layer_count: int,
                 where: str = "model") -> None:
        self.metadata = metadata
        self.architecture = architecture
        self.layer_count = layer_count
        self.where = where
        self.asked: set[str] = set()

    @classmethod
    def of_model(cls, metadata: Mapping[str, Any], where: str, *,
                 most_layers: int) -> GgufMetadata:
        """The reader of a model's keys: its ``general.architecture`` (a name) and
        ``{architecture}.block_count`` (1 to ``most_layers``)."""
        architecture = metadata.get("general.architecture")
        if not isinstance(architecture, str) or not architecture:
            if architecture is None:
                raise ModelError("MissingGgufKey", f"{where}: GGUF key "
                                 f"'general.architecture' is missing", file=where,
                                 key="general.architecture")
            raise ModelError("InvalidGguf", f"{where}: GGUF key 'general.architecture' must "
                             f"be a name (got {shown(architecture)})", file=where,
                             key="general.architecture")
        reader = cls(metadata, architecture, 0, where)
        reader.layer_count = reader.count("block_count", minimum=1, maximum=most_layers)
        return reader

    # -- names and refusals ------------------------------------------------------------

    def key(self, name: str) -> str:
        return f"{self.architecture}.{name}"

    def has(self, name: str) -> bool:
        self.asked.add(name)
        return self.key(name) in self.metadata

    def raw(self, name: str) -> Any:
        """The value as the file holds it (None when absent), unchecked."""
        self.asked.add(name)
        return self.metadata.get(self.key(name))

    def missing(self, name: str, why: str = "") -> ModelError:
        key = self.key(name)
        return ModelError("MissingGgufKey", f"{self.where}: GGUF key {key!r} is missing"
                          + (f" ({why})" if why else ""), file=self.where, key=key)

    def bad(self, name: str, problem: str, value: Any) -> ModelError:
        key = self.key(name)
        return ModelError("InvalidGguf", f"{self.where}: GGUF key {key!r} {problem} "
                          f"(got {shown(value)})", file=self.where, key=key)

    # -- scalars -------------------------------------------------------------------------

    def count(self, name: str, default: int | None = None, *, minimum: int = 0,
              maximum: int = MAX_COUNT, why: str = "") -> int:
        """An integer within ``[minimum, maximum]``; ``default`` when the key is absent
        (None: the key is required). ``why`` says what needs the bound, for messages."""
        value = self.raw(name)
        if value is None:
            if default is None:
                raise self.missing(name, why)
            return default
        return self._checked_count(name, value, minimum, maximum, why)

    def _checked_count(self, name: str, value: Any, minimum: int, maximum: int,
                       why: str, entry: str = "") -> int:
        where = f"{entry} " if entry else ""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(name, f"{where}must be an integer", value)
        if value < minimum or value > maximum:
            bounds = (f"at least {minimum:,}" if maximum == MAX_COUNT else
                      f"{minimum:,}" if minimum == maximum else
                      f"between {minimum:,} and {maximum:,}")
            raise self.bad(name, f"{where}must be {bounds}" + (f" ({why})" if why else ""),
                           value)
        return value

    def flag(self, name: str, default: bool = False) -> bool:
        """True or false (a GGUF bool; 0 and 1 are taken as llama.cpp takes them)."""
        value = self.raw(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise self.bad(name, "must be true or false", value)

    def real(self, name: str, default: float = 0.0) -> float:
        """A finite number."""
        value = self.raw(name)
        if value is None:
            return default
        return self._checked_real(name, value)

    def _checked_real(self, name: str, value: Any, entry: str = "") -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                isinstance(value, float) and not math.isfinite(value)):
            raise self.bad(name, f"{entry + ' ' if entry else ''}must be a finite number",
                           value)
        return float(value)

    # -- arrays --------------------------------------------------------------------------

    def _layer_array(self, name: str, value: list[Any]) -> list[Any]:
        if len(value) != self.layer_count:
            raise self.bad(name, f"has {len(value):,} entries for {self.layer_count} layers",
                           value)
        return value

    def counts_per_layer(self, name: str, default: int | list[int] | None = None, *,
                         minimum: int = 0, maximum: int = MAX_COUNT,
                         why: str = "") -> list[int]:
        """One count per layer: the key's array, or its one value for every layer;
        ``default`` (a value or a list) when absent (None: required)."""
        value = self.raw(name)
        if value is None:
            if default is None:
                raise self.missing(name, why)
            return list(default) if isinstance(default, list) else \
                [default] * self.layer_count
        if isinstance(value, list):
            return [self._checked_count(name, entry, minimum, maximum, why,
                                        f"entry {index}")
                    for index, entry in enumerate(self._layer_array(name, value))]
        return [self._checked_count(name, value, minimum, maximum, why)] * self.layer_count

    def reals_per_layer(self, name: str, default: float = 0.0) -> list[float]:
        """One finite number per layer: the key's array or its one value."""
        value = self.raw(name)
        if value is None:
            return [default] * self.layer_count
        if isinstance(value, list):
            return [self._checked_real(name, entry, f"entry {index}")
                    for index, entry in enumerate(self._layer_array(name, value))]
        return [self._checked_real(name, value)] * self.layer_count

    def flags_per_layer(self, name: str) -> list[bool] | None:
        """A per-layer array of true/false flags; None when the key is not an array."""
        value = self.raw(name)
        if not isinstance(value, list):
            return None
        flags = self._layer_array(name, value)
        if not all(isinstance(v, bool) or (isinstance(v, int) and v in (0, 1))
                   for v in flags):
            raise self.bad(name, "must hold one true/false flag per layer", value)
        return [bool(v) for v in flags]

    def counts(self, name: str, *, longest: int, minimum: int = 0,
               maximum: int = MAX_COUNT, why: str = "") -> list[int]:
        """An array of at most ``longest`` counts; empty when absent."""
        value = self.raw(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.bad(name, "must be an array of integers", value)
        if len(value) > longest:
            raise self.bad(name, f"holds {len(value):,} entries; at most {longest:,} "
                           + (f"({why})" if why else "are read"), value)
        return [self._checked_count(name, entry, minimum, maximum, why, f"entry {index}")
                for index, entry in enumerate(value)]
