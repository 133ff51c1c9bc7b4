"""The Dask adapter: the one module that talks to ``dask.distributed``.

:func:`results` sends sweep batches to a cluster and yields each result as it finishes.
The cluster is an existing one (``scheduler="tcp://host:8786"`` or a
``dask.distributed.Client``), or a ``LocalCluster`` started here and closed afterwards
when ``scheduler`` is ``None`` or ``"dask"``. Workers of a remote cluster need the
``planner`` package installed (the same version); they do not need the fleet files,
which travel with the batches.

A worker that dies is Dask's to handle: its unfinished batches are run again on the
other workers, and the batches already yielded were saved by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from distributed import Client, KilledWorker, LocalCluster, as_completed

# What Dask raises when the cluster itself fails: a batch that keeps killing its workers
# (Dask gives up after a few tries), or a scheduler that cannot be reached or goes away
# (its connection errors are OSErrors).
CLUSTER_FAILURES = (KilledWorker, OSError)


def local_cluster(workers: int | None = None, *, processes: bool = True) -> LocalCluster:
    """A ``LocalCluster`` of ``workers`` single-threaded workers (default 2), with its
    dashboard off so that it never fights for a port."""
    return LocalCluster(n_workers=workers or 2, threads_per_worker=1, processes=processes,
                        dashboard_address=None)


def results(batches: Sequence[Any], function: Callable[[Any], Any], *,
            scheduler: Any = None, workers: int | None = None) -> Generator[Any]:
    """``function(batch)`` for every batch, run on the cluster, yielded in the order
    they complete. Raises one of :data:`CLUSTER_FAILURES` when the cluster fails; the
    results yielded before stand."""
    cluster = None
    if isinstance(scheduler, Client):
        client, owned = scheduler, False
    elif scheduler is None or scheduler == "dask":
        cluster = local_cluster(workers)
        client, owned = Client(cluster), True
    else:
        client, owned = Client(scheduler), True
    try:
        futures = client.map(function, list(batches), pure=False)
        for future in as_completed(futures):
            result = future.result()
            future.release()
            yield result
    finally:
        if owned:
            client.close()
        if cluster is not None:
            cluster.close()
