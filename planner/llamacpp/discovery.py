"""A fleet from what rpc-servers reported (``planner discover``): one node per device,
its total memory as ``vram``, its free memory as ``max_vram``, its server's address (and
its index there) for ``planner launch``, and the shortest round trip to its server as
its ``latency_ms``.

Pure: it reads :class:`~planner.llamacpp.rpc.RpcServerReport`\\ s (from
:func:`planner.llamacpp.query_rpc_servers` or recorded bytes) and builds the one fleet
document type, :class:`~planner.fleet.FleetDocument`.

llama.cpp passes every activation through the host that runs llama-server (each
rpc-server talks only to it), so a round trip measured from that host is the latency a
stage hop pays; measured from elsewhere it is only a guess, and the docs say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.fleet import FleetDocument, ModelChoice, ReliabilityOverride
from planner.llamacpp.rpc import RpcServerReport
from planner.planning import NodeBudget


def node_id(report: RpcServerReport, device: int) -> str:
    """A discovered device's node id: the server's address as named, and
    ``/device`` when the server has more than one device."""
    if len(report.devices) == 1:
        return report.address
    return f"{report.address}/{device}"


def discovered_fleet(reports: Sequence[RpcServerReport], model: ModelChoice, *,
                     name: str | None = None, gpu: str | None = None,
                     latency: bool = True) -> FleetDocument:
    """The fleet of every device of ``reports``, planning ``model``. ``gpu`` names the
    nodes' catalog kind (all of them); ``latency``: give each node its server's shortest
    round trip as ``latency_ms``."""
    nodes = []
    addresses = []
    devices = []
    reliability = {}
    for report in reports:
        round_trip = report.round_trip_ms if latency else None
        for device in report.devices:
            identifier = node_id(report, device.index)
            nodes.append(NodeBudget(
                identifier, device.total_bytes, device.free_bytes, 0,
                None if round_trip is None else round(round_trip, 3)))
            addresses.append((identifier, report.address))
            if len(report.devices) > 1:
                devices.append((identifier, device.index))
            if gpu is not None:
                reliability[identifier] = ReliabilityOverride(gpu=gpu)
    return FleetDocument(model=model, nodes=tuple(nodes), name=name,
                         minimum_nodes=1, reliability=reliability,
                         addresses=tuple(addresses), rpc_devices=tuple(devices))


def discovery_warnings(reports: Sequence[RpcServerReport]) -> list[str]:
    """What a person should know about the servers before planning on them."""
    warnings = []
    by_host: dict[str, list[RpcServerReport]] = {}
    for report in reports:
        if report.connected_to is not None:
            by_host.setdefault(report.connected_to.rpartition(":")[0], []).append(report)
    for host, reports_there in by_host.items():
        same: dict[int, list[tuple[RpcServerReport, int]]] = {}
        for report in reports_there:
            for device in report.devices:
                same.setdefault(device.total_bytes, []).append((report, device.index))
        for total, held in same.items():
            servers = {report.address for report, _ in held}
            # A CPU backend reports the host's memory as all free; a GPU's driver always
            # holds some. Two such devices on one host are one memory; two servers on
            # one host with devices of one size may be serving the same one.
            host_memory = all(report.devices[index].free_bytes == total
                              for report, index in held)
            if len(held) > 1 and (len(servers) > 1 or host_memory):
                ids = ", ".join(node_id(report, index) for report, index in held)
                warnings.append(
                    f"{ids} run on one host ({host}) and report the same total memory "
                    f"({total:,} bytes): if they are one memory (the host's, behind CPU "
                    "backends, or one GPU served twice), they share it and the fleet "
                    "counts it more than once; lower their max_vram to their share")
    for report in reports:
        if report.transport_offered:
            warnings.append(f"{report.address} offered a faster transport (RDMA) in its "
                            "HELLO; discover asked over TCP only, llama-server may take it")
    return warnings


def devices_table(reports: Sequence[RpcServerReport]) -> list[dict[str, Any]]:
    """One row per discovered device, in the fleet's order: ``node_id``, ``address``,
    ``connected_to``, ``rpc_device``, ``total_bytes``, ``free_bytes``,
    ``round_trip_ms``, ``protocol_version``."""
    return [{"node_id": node_id(report, device.index), "address": report.address,
             "connected_to": report.connected_to, "rpc_device": device.index,
             "total_bytes": device.total_bytes, "free_bytes": device.free_bytes,
             "round_trip_ms": report.round_trip_ms,
             "protocol_version": ".".join(str(part) for part in report.version)}
            for report in reports for device in report.devices]
