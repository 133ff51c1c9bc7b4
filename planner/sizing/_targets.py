"""What a sizing question asks: the targets, the kinds to size with and their prices,
and the nodes a fleet of them has."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from planner.errors import CodedError
from planner.fleet import expanded_node_ids
from planner.limits import DEFAULT_PRICE_KIND
from planner.models.gpus import PRICE_KINDS, GpuModel, catalog_kind, listed_kinds
from planner.models.spec import ModelError, ModelSpec
from planner.performance import ModelTraffic, model_traffic
from planner.planning.inputs import NodeBudget
from planner.targets import Targets, TargetsError

# The targets sizing takes are the package's one targets type.
SizingTargets = Targets

# What each kind of price is, as sizing's answers say it.
PRICE_KIND_TEXT = {
    "rented": "rented (what a provider charges per GPU-hour)",
    "owned": "owned (a purchase price spread over hours of use)",
}


class SizingError(CodedError):
    """Sizing could not run or found nothing.

    ``code`` is stable (a target out of range is :class:`planner.targets.TargetsError`
    ``InvalidTargets``): ``UnknownKind`` (a kind asked for is not in the catalog),
    ``UnpricedKind`` (a kind asked for has no ``price_per_hour``), ``OtherPriceKind`` (a
    kind asked for is priced as owned where sizing compares rented prices, or the other
    way round), ``EmptyCatalog`` (no kind priced the way sizing compares),
    ``AmbiguousKindIds`` (two kinds whose node ids would interleave, such as ``a`` and
    ``a-1``), ``NoFleetMeetsTargets`` (nothing within the counts available meets the
    targets; the message says why), ``TooManyKinds`` (more kinds than the exact search
    takes, :data:`planner.limits.MAX_SIZING_KINDS`) or ``SizingTooLarge`` (the search
    passed its bounds on plans or queued partial fleets before proving its answer).
    """

    codes = ("UnknownKind", "UnpricedKind", "OtherPriceKind",
             "EmptyCatalog", "AmbiguousKindIds", "NoFleetMeetsTargets", "TooManyKinds",
             "SizingTooLarge")


def fleet_nodes(kinds: Sequence[GpuModel], counts: Sequence[int]) -> tuple[NodeBudget, ...]:
    """The nodes of a fleet: ``counts[i]`` nodes of ``kinds[i]``, named ``<kind>-00`` ..."""
    nodes = []
    for gpu, count in zip(kinds, counts, strict=True):
        if count:
            for node_id in expanded_node_ids(gpu.kind, count):
                nodes.append(NodeBudget(node_id, gpu.memory_bytes, None,
                                        gpu.headroom_bytes or 0,
                                        gpu.stage_transfer_latency_ms))
    return tuple(nodes)


def fleet_node_kinds(kinds: Sequence[GpuModel], counts: Sequence[int]) -> dict[str, str]:
    """The kind id of each node of :func:`fleet_nodes` (``kinds``, ``counts``), by node
    id: sizing names each node's kind rather than leaving it to be recognised."""
    return {node_id: gpu.kind for gpu, count in zip(kinds, counts, strict=True) if count
            for node_id in expanded_node_ids(gpu.kind, count)}


def select_kinds(catalog: Sequence[GpuModel], names: Iterable[str] | None = None,
                 price_kind: str = DEFAULT_PRICE_KIND) -> tuple[list[GpuModel], list[str]]:
    """The kinds to size with: those ``names`` gives (kind ids or names, any case), else
    every kind priced as ``price_kind``; and the ids of the kinds left out (no price, or
    another kind of price). A kind named but unpriced or priced otherwise is refused."""
    _check_price_kind(price_kind)
    if names is None:
        chosen = [gpu for gpu in catalog if gpu.price_per_hour is not None
                  and gpu.price_kind == price_kind]
        return chosen, [gpu.kind for gpu in catalog if gpu.price_per_hour is None
                        or gpu.price_kind != price_kind]
    picked: dict[str, GpuModel] = {}
    for name in names:
        try:
            gpu = catalog_kind(catalog, name)
        except ModelError:
            raise SizingError("UnknownKind", f"no catalog kind {name!r}; known: "
                              f"{listed_kinds(catalog)}", kind=name) from None
        if gpu.price_per_hour is None:
            raise SizingError("UnpricedKind", f"kind {gpu.kind} has no price_per_hour; add "
                              "one to the catalog to size with it", kind=gpu.kind)
        if gpu.price_kind != price_kind:
            raise SizingError(
                "OtherPriceKind",
                f"kind {gpu.kind} is priced as {gpu.price_kind} and sizing compares "
                f"{price_kind} prices: size with {gpu.price_kind} prices to use it "
                f"(--prices {gpu.price_kind}), or give it a {price_kind} price",
                kind=gpu.kind, price_kind=gpu.price_kind)
        picked.setdefault(gpu.kind, gpu)
    return list(picked.values()), []


def _check_price_kind(price_kind: Any) -> None:
    if price_kind not in PRICE_KINDS:
        raise TargetsError("InvalidTargets", f"price_kind must be one of "
                          f"{', '.join(PRICE_KINDS)} (got {price_kind!r})",
                          field="price_kind", value=price_kind)


def _check_kind_ids(kinds: Sequence[GpuModel]) -> None:
    # Removing "any f nodes" is checked per kind count; that relies on node ids of
    # different kinds comparing the same way whatever their numbers, which fails when one
    # kind id continues another's with "-<digit>" ("a-05" < "a-1-00" < "a-15"). Sorted,
    # the ids that continue "a" that way lie between "a-0" and "a-:" (":" follows "9").
    ids = sorted(gpu.kind for gpu in kinds)
    for first in ids:
        at = bisect_left(ids, f"{first}-0")
        if at < len(ids) and ids[at] < f"{first}-:":
            second = ids[at]
            raise SizingError(
                "AmbiguousKindIds",
                f"kind ids {first!r} and {second!r} give node ids that interleave; "
                "give one of them another id in the catalog", kinds=[first, second])


def _model_fields(model: ModelSpec | Mapping[str, Any]) -> tuple[dict[str, Any],
                                                                  ModelTraffic | None]:
    if isinstance(model, ModelSpec):
        return model.planning_fields(), ModelTraffic.from_spec(model)
    fields = {key: model[key] for key in ("native_context_length", "layer_count",
                                          "model_weight_bytes", "kv_bytes_per_token")
              if key in model}
    if model.get("layer_weight_bytes") is not None:
        fields["layer_weight_bytes"] = list(model["layer_weight_bytes"])
    return fields, model_traffic(None, model)


