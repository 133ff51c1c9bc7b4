"""Each node's failure rate and repair time, and the share of time it is down.

Each node fails and is repaired independently. With an annual failure rate ``afr``
(failures per node-year) and a mean repair time ``repair_hours``, a node's mean time to
failure is ``8760 / afr`` hours and it is down a share of the time

    u = repair_hours / (8760 / afr + repair_hours)

(the steady state of a two-state failure/repair process; only the means matter). A node's
figures come, field by field, from its own override, the fleet-wide value, its catalog
kind (:func:`planner.models.gpus.node_gpu_kind`) and the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner._validate import Fail, instance, number, shown
from planner.errors import CodedError
from planner.fleet.document import FleetDocument, ReliabilityOverride
from planner.models.gpus import node_gpu_kinds
from planner.planning import NodeBudget

HOURS_PER_YEAR = 8760

# Meta, "The Llama 3 Herd of Models" (2024), section 3.3.4 and table 5: 419 unexpected
# interruptions in a 54-day snapshot on 16,384 H100 GPUs. Counting the ones a failing GPU
# or its host causes (faulty GPU 148, HBM3 72, SRAM 19, GPU system processor 17, silent
# data corruption 6, thermal interface and sensor 6; NIC 7, SSD 3, power supply 3,
# chassis 2, IO expansion board 2, CPU 2, system memory 2: 289 in all) over
# 16,384 x 54 / 365 = 2,423.9 GPU-years gives 0.119 failures per GPU-year. Software bugs,
# network switches and host maintenance are left out: they do not take one node down.
DEFAULT_ANNUAL_FAILURE_RATE = 0.119
# No published figure for repair time: 72 hours is an assumption (a part replaced under
# next-business-day on-site support, over a weekend). Set it per kind in the catalog, per
# node in the fleet file, or fleet-wide with ``--repair-hours``.
DEFAULT_REPAIR_HOURS = 72.0


class AvailabilityError(CodedError):
    """Availability input that cannot be evaluated.

    ``code`` is ``InvalidReliability`` (a failure rate or repair time that is negative,
    not a number or infinite), ``InvalidTarget`` (an availability target outside (0, 1)
    or a bad tolerance), ``InvalidSpareKind`` (a spare kind's name, budget or price
    per hour of the wrong type or out of range) or ``SparesUnreachable`` (no number of
    spares up to the limit reaches the target).
    """

    codes = ("InvalidReliability", "InvalidTarget", "InvalidSpareKind", "SparesUnreachable")


def _positive_number(value: Any, name: str, node_id: str | None, *, allow_zero: bool) -> float:
    where = f"{name} of node {node_id!r}" if node_id is not None else name
    fail = _invalid("InvalidReliability", name, where, node_id)
    if allow_zero:
        return float(number(value, fail))
    return float(number(value, fail, above=0))


def _invalid(code: str, name: str, where: str | None = None,
             node_id: str | None = None) -> Fail:
    return lambda problem, value: AvailabilityError(
        code, f"{where or name}: {problem} (got {shown(value)})", field=name,
        node_id=node_id, value=value)


@dataclass(frozen=True, slots=True)
class NodeReliability:
    """How often a node fails (per year) and how long a repair takes (hours)."""

    annual_failure_rate: float = DEFAULT_ANNUAL_FAILURE_RATE
    repair_hours: float = DEFAULT_REPAIR_HOURS

    def __post_init__(self) -> None:
        object.__setattr__(self, "annual_failure_rate", _positive_number(
            self.annual_failure_rate, "annual_failure_rate", None, allow_zero=True))
        object.__setattr__(self, "repair_hours", _positive_number(
            self.repair_hours, "repair_hours", None, allow_zero=True))

    @property
    def down_probability(self) -> float:
        """``u = repair_hours / (8760 / afr + repair_hours)``; 0 for a node that never
        fails or is repaired instantly."""
        if self.annual_failure_rate == 0 or self.repair_hours == 0:
            return 0.0
        return self.repair_hours / (HOURS_PER_YEAR / self.annual_failure_rate
                                    + self.repair_hours)

    @property
    def failures_per_hour(self) -> float:
        return self.annual_failure_rate / HOURS_PER_YEAR

    def to_dict(self) -> dict[str, float]:
        return {"annual_failure_rate": self.annual_failure_rate,
                "repair_hours": self.repair_hours}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeReliability:
        return cls(annual_failure_rate=data.get("annual_failure_rate",
                                                DEFAULT_ANNUAL_FAILURE_RATE),
                   repair_hours=data.get("repair_hours", DEFAULT_REPAIR_HOURS))


def _catalog_figures(gpu: Any) -> NodeReliability | None:
    if gpu is None or gpu.annual_failure_rate is None or gpu.repair_hours is None:
        return None
    return NodeReliability(annual_failure_rate=gpu.annual_failure_rate,
                           repair_hours=gpu.repair_hours)


def document_overrides(document: FleetDocument) -> dict[str, ReliabilityOverride]:
    """The per-node failure figures a fleet document gives, by node id."""
    return dict(document.reliability)


def _shipped_catalog() -> list[Any]:
    from planner.models import load_gpu_catalog

    return load_gpu_catalog()


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """A node's failure figures and where each came from: ``"the node's own"`` (its
    fleet-file entry), ``"fleet-wide"`` (``--afr``/``--repair-hours``), ``"catalog:
    <kind>"`` or ``"default"``. ``kind`` is the node's catalog kind id, if known."""

    reliability: NodeReliability
    annual_failure_rate_source: str
    repair_hours_source: str
    kind: str | None = None


def fleet_figures(
    nodes: Sequence[NodeBudget],
    *,
    catalog: Sequence[Any] | None = None,
    overrides: Mapping[str, ReliabilityOverride] | None = None,
    annual_failure_rate: float | None = None,
    repair_hours: float | None = None,
) -> dict[str, NodeFigures]:
    """Each node's figures as :func:`fleet_reliability` gives them, with where each
    came from."""
    overrides = overrides or {}
    _check_fleet_wide(annual_failure_rate, repair_hours)
    named = {node_id: own.gpu for node_id, own in overrides.items() if own.gpu is not None}
    kinds = node_gpu_kinds(nodes, _shipped_catalog() if catalog is None else catalog, named)
    result: dict[str, NodeFigures] = {}
    for node in nodes:
        own = overrides.get(node.node_id, ReliabilityOverride())
        kind = kinds[node.node_id]
        base = _catalog_figures(kind)
        base_source = f"catalog: {kind.kind}" if base is not None and kind else "default"
        base = base or NodeReliability()
        try:
            afr, afr_source = next((v, where) for v, where in (
                (own.annual_failure_rate, "the node's own"),
                (annual_failure_rate, "fleet-wide"),
                (base.annual_failure_rate, base_source)) if v is not None)
            repair, repair_source = next((v, where) for v, where in (
                (own.repair_hours, "the node's own"), (repair_hours, "fleet-wide"),
                (base.repair_hours, base_source)) if v is not None)
            result[node.node_id] = NodeFigures(
                NodeReliability(annual_failure_rate=afr, repair_hours=repair),
                afr_source, repair_source, kind.kind if kind is not None else None)
        except AvailabilityError as error:
            raise AvailabilityError(error.code, f"node {node.node_id!r}: {error.message}",
                                    **{**error.details, "node_id": node.node_id}) from None
    return result


def _check_fleet_wide(annual_failure_rate: float | None, repair_hours: float | None) -> None:
    """The fleet-wide figures are no node's: a bad one is refused as such, before any node
    takes it (not as the first node's)."""
    for name, value in (("annual_failure_rate", annual_failure_rate),
                        ("repair_hours", repair_hours)):
        if value is not None:
            number(value, _invalid("InvalidReliability", name, f"fleet-wide {name}"))


def fleet_reliability(
    nodes: Sequence[NodeBudget],
    *,
    catalog: Sequence[Any] | None = None,
    overrides: Mapping[str, ReliabilityOverride] | None = None,
    annual_failure_rate: float | None = None,
    repair_hours: float | None = None,
) -> dict[str, NodeReliability]:
    """Each node's failure rate and repair time, field by field, from the first that
    gives it: the node's own override, the fleet-wide value (``annual_failure_rate``,
    ``repair_hours``), its catalog kind (:func:`planner.models.gpus.node_gpu_kind`, in
    ``catalog``, default the shipped one), the defaults (:func:`fleet_figures` says
    which gave each)."""
    return {node_id: figures.reliability for node_id, figures in fleet_figures(
        nodes, catalog=catalog, overrides=overrides, annual_failure_rate=annual_failure_rate,
        repair_hours=repair_hours).items()}


def per_node_reliability(nodes: Sequence[NodeBudget],
                         reliability: Mapping[str, NodeReliability] | NodeReliability | None
                         ) -> dict[str, NodeReliability]:
    """Each node's figures: one :class:`NodeReliability` for all (``None``: the
    defaults), or a mapping by node id in which a node not named takes the defaults; a
    mapping naming a node not in the fleet is refused (``InvalidReliability``)."""
    if reliability is None or isinstance(reliability, NodeReliability):
        shared = reliability or NodeReliability()
        return {node.node_id: shared for node in nodes}
    instance(reliability, Mapping, _invalid("InvalidReliability", "reliability"),
             "a NodeReliability or a mapping of node id to NodeReliability")
    unknown = sorted(map(str, set(reliability) - {node.node_id for node in nodes}))
    if unknown:
        raise AvailabilityError("InvalidReliability",
                                f"reliability is given for nodes not in the fleet: "
                                f"{', '.join(unknown)}", field="reliability",
                                node_id=unknown[0])
    default = NodeReliability()
    return {node.node_id: instance(
        reliability.get(node.node_id, default), NodeReliability,
        _invalid("InvalidReliability", "reliability",
                 f"reliability of node {shown(node.node_id)}", node.node_id),
        "a NodeReliability") for node in nodes}


def down_probabilities(nodes: Sequence[NodeBudget],
                       reliability: Mapping[str, NodeReliability] | NodeReliability | None
                       ) -> dict[str, float]:
    """``u`` per node id; nodes missing from ``reliability`` get the defaults."""
    return {node_id: figures.down_probability
            for node_id, figures in per_node_reliability(nodes, reliability).items()}
