"""What the editors hold, as typed: a node's row, the model's fields and the planning
options, each read into the planner's values on demand, and what a fleet file says of a
node besides (:class:`NodeExtras`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from planner.fleet import ReliabilityOverride
from planner.planning import NodeBudget
from planner.units import exact_size_text
from planner.workbench.problems import WorkbenchInputError
from planner.workbench.typed_values import (
    exact_or_parsed,
    node_size_text,
    parse_context_text,
    parse_default_latency,
    parse_latency,
    parse_size,
    parse_whole,
    weight_size_text,
)


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One fleet row as typed: sizes as text, blank meaning "not set".

    ``exact_vram_bytes`` and ``exact_max_vram_bytes`` are the exact sizes behind a
    rounded text (:func:`node_size_text`), used while the text still reads as shown;
    rows compare by their text."""

    node_id: str
    vram: str
    max_vram: str = ""
    headroom: str = "0"
    latency_ms: str = ""
    exact_vram_bytes: int | None = field(default=None, compare=False)
    exact_max_vram_bytes: int | None = field(default=None, compare=False)

    @classmethod
    def sized(cls, node_id: str, vram_bytes: int) -> NodeRow:
        """A row of ``vram_bytes`` written as the rows write sizes (:func:`node_size_text`)."""
        text, exact = node_size_text(vram_bytes)
        return cls(node_id, text, exact_vram_bytes=exact)

    def kept_exact(self, before: NodeRow) -> NodeRow:
        """This row with ``before``'s exact sizes where it has none of its own and its
        text still reads as before (a row read back from the editor's text)."""
        return replace(
            self,
            exact_vram_bytes=(before.exact_vram_bytes if self.exact_vram_bytes is None
                              and self.vram == before.vram else self.exact_vram_bytes),
            exact_max_vram_bytes=(before.exact_max_vram_bytes
                                  if self.exact_max_vram_bytes is None
                                  and self.max_vram == before.max_vram
                                  else self.exact_max_vram_bytes))

    def to_budget(self, index: int) -> NodeBudget:
        """The node as the planner sees it. Raises :class:`WorkbenchInputError`."""
        node_id = self.node_id
        where = f"nodes[{index}]"
        if not node_id.strip():
            raise WorkbenchInputError(f"{where}.node_id", "every node needs an id",
                                      label=f"row {index + 1} id")
        label = f"node {node_id!r}"
        detected = exact_or_parsed(self.vram, self.exact_vram_bytes, f"{where}.vram",
                                    label=f"{label} VRAM", node_id=node_id)
        cap = exact_or_parsed(self.max_vram, self.exact_max_vram_bytes,
                               f"{where}.max_vram", label=f"{label} max VRAM",
                               node_id=node_id, optional=True)
        headroom = parse_size(self.headroom, f"{where}.headroom",
                              label=f"{label} headroom", node_id=node_id, optional=True)
        latency = parse_latency(self.latency_ms, f"{where}.latency_ms",
                                label=f"{label} latency", node_id=node_id)
        assert detected is not None
        return NodeBudget(node_id, detected, cap, headroom or 0, latency)

    @classmethod
    def from_budget(cls, node: NodeBudget) -> NodeRow:
        vram, exact_vram = node_size_text(node.detected_vram_bytes)
        max_vram, exact_max = (node_size_text(node.max_vram_bytes)
                               if node.max_vram_bytes is not None else ("", None))
        return cls(
            node_id=node.node_id,
            vram=vram,
            max_vram=max_vram,
            exact_vram_bytes=exact_vram,
            exact_max_vram_bytes=exact_max,
            headroom=exact_size_text(node.runtime_headroom_bytes),
            latency_ms=(str(node.stage_transfer_latency_ms)
                        if node.stage_transfer_latency_ms is not None else ""),
        )

    def to_dict(self) -> dict[str, str]:
        return {"node_id": self.node_id, "vram": self.vram, "max_vram": self.max_vram,
                "headroom": self.headroom, "latency_ms": self.latency_ms}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> NodeRow:
        text = {key: str(data.get(key, default)) for key, default in (
            ("node_id", ""), ("vram", ""), ("max_vram", ""), ("headroom", "0"),
            ("latency_ms", ""))}
        return cls(text["node_id"], text["vram"], text["max_vram"], text["headroom"],
                   text["latency_ms"])


def file_size_text(file_bytes: int | None) -> str:
    """The size of a preset's file as the editor shows it: as the weights are, blank for
    none (the preset's own weights)."""
    return "" if file_bytes is None else weight_size_text(file_bytes)


@dataclass(frozen=True, slots=True)
class ModelFields:
    """The model as the editor holds it.

    ``preset`` or ``gguf`` says where the numbers came from; both are ``None`` for numbers
    typed by hand. ``kv_cache_type`` applies to a preset or GGUF model. ``file_size`` is
    the size of the file a preset is run from as typed (blank: the preset's own weights;
    the fleet file's ``model.file_bytes``), shown as the weights are, with the exact
    ``file_bytes`` behind it while the text still reads as that rounding.
    ``layer_weight_bytes`` are exact per-layer weights (kept only while they match
    ``layer_count`` and ``model_weight_bytes``). ``model_weight_bytes`` is shown rounded
    (:func:`weight_size_text`); ``exact_weight_bytes`` is the exact figure behind it, used
    as long as the text still reads as that rounding.
    """

    layer_count: int
    native_context_length: int
    model_weight_bytes: str
    kv_bytes_per_token: str
    layer_weight_bytes: tuple[int, ...] | None = None
    name: str | None = None
    preset: str | None = None
    gguf: str | None = None
    kv_cache_type: str | None = None
    exact_weight_bytes: int | None = None
    file_size: str = ""
    file_bytes: int | None = None

    @property
    def label(self) -> str:
        return self.name or self.preset or (Path(self.gguf).name if self.gguf else "custom model")

    def planning_fields(self) -> dict[str, Any]:
        """The five model fields of the request (docs/rules.md §1). Raises
        :class:`WorkbenchInputError`."""
        weights = exact_or_parsed(self.model_weight_bytes, self.exact_weight_bytes,
                                  "model_weight_bytes", label="model weight bytes",
                                  weights=True)
        kv = parse_size(self.kv_bytes_per_token, "kv_bytes_per_token",
                        label="KV bytes per token", bare_bytes=True)
        return {
            "native_context_length": self.native_context_length,
            "layer_count": self.layer_count,
            "model_weight_bytes": weights,
            "kv_bytes_per_token": kv,
            "layer_weight_bytes": self.layer_weight_bytes,
        }

    def stored_file_bytes(self) -> int | None:
        """The size of the file the preset is run from (``None``: its own weights).
        Raises :class:`WorkbenchInputError`."""
        return exact_or_parsed(self.file_size, self.file_bytes, "model.file_bytes",
                               label="file size", optional=True, weights=True)

    @classmethod
    def from_planning_fields(cls, fields: dict[str, Any], **source: Any) -> ModelFields:
        """The editor's fields of a model's planning ``fields``, with where they come
        from (``source``: ``name``, ``preset``, ``file_bytes`` and the like); a
        ``file_bytes`` given without its ``file_size`` text is shown as the weights are."""
        if "file_size" not in source:
            source = {**source, "file_size": file_size_text(source.get("file_bytes"))}
        weights = fields.get("layer_weight_bytes")
        return cls(
            layer_count=int(fields["layer_count"]),
            native_context_length=int(fields["native_context_length"]),
            model_weight_bytes=weight_size_text(int(fields["model_weight_bytes"])),
            exact_weight_bytes=int(fields["model_weight_bytes"]),
            # KV sizes are quoted in plain bytes per token ("131,072"), so shown that way.
            kv_bytes_per_token=str(int(fields["kv_bytes_per_token"])),
            layer_weight_bytes=tuple(weights) if weights is not None else None,
            **source,
        )


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """Planning options as typed; blank means "not set"."""

    minimum_nodes: int = 1
    context_length_override: str = ""
    parallel_lanes_override: str = ""
    target_decode_tpot_ms: str = ""
    default_latency_ms: str = ""
    """The latency of nodes without their own: milliseconds (``"5"``, ``"500 us"``),
    ``"measured"`` (the slowest a node has), or blank (none: they count as 0 ms)."""

    def planning_fields(self) -> dict[str, Any]:
        """The request's option fields (docs/rules.md §1). Raises :class:`WorkbenchInputError`."""
        if self.minimum_nodes < 0:
            raise WorkbenchInputError("minimum_nodes", "cannot be negative",
                                      value=str(self.minimum_nodes), label="minimum nodes")
        return {
            "minimum_nodes": self.minimum_nodes,
            "context_length_override": parse_context_text(
                self.context_length_override, "context_length_override",
                label="context override"),
            "parallel_lanes_override": parse_whole(
                self.parallel_lanes_override, "parallel_lanes_override",
                label="lanes override"),
            "target_decode_tpot_ms": parse_whole(
                self.target_decode_tpot_ms, "target_decode_tpot_ms",
                label="TPOT target", unit="ms"),
            "default_latency_ms": parse_default_latency(self.default_latency_ms),
        }



@dataclass(frozen=True, slots=True)
class NodeExtras:
    """What a fleet file says of a node besides its planning fields: its own ``gpu``
    kind and failure figures, its rpc-server ``address`` and its device there. The
    editor does not show them as text; they stay with the node's row through every edit
    and are saved."""

    reliability: ReliabilityOverride | None = None
    address: str | None = None
    rpc_device: int | None = None

    @property
    def gpu(self) -> str | None:
        return self.reliability.gpu if self.reliability is not None else None

    def copied(self) -> NodeExtras:
        """The extras of a copy of the node: the same kind of GPU, at another address."""
        return NodeExtras(self.reliability)

