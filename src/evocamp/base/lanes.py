"""Lanes: a shard's evaluations run ``n`` at once (``evaluation.concurrency``).

:func:`in_lanes` runs ``lanes`` threads that take indexed items from one shared
queue, in index order, each as soon as it is free (a lane held up by a long
item does not hold up the items after it), each thread driving its own supervised
children (:mod:`evocamp.base.supervised`), and gathers their results by index:
whatever the number of lanes and whichever lane took an item, the caller sees the
results of one lane, and a failure raised is that of the first failed item, every
item before it done, as in one lane. :func:`lane_devices` gives each lane its own
GPUs from the job's (or Dask worker's) visible ones
(``evaluation.gpus_per_evaluation``), which its children see in
``CUDA_VISIBLE_DEVICES``.

In Dask and asynchronous modes a Dask worker runs ``evaluation.concurrency`` tasks at
once, each in a lane of the worker's own (:func:`worker_lane`: the lowest free one
of its process), whose GPUs are its own of the worker's visible ones.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from evocamp.base.errors import ConfigError

#: The variables a lane sets in its children (a program started there takes them).
LANE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "EVOCAMP_LANE")


def in_lanes(
    lane: Callable[[int, Callable[[], int | None], dict], None], items: list[int], lanes: int
) -> dict[int, object]:
    """``items`` (increasing indices) done by ``lanes`` lanes at once, each taking the
    next item of one shared queue when it is free; their results by index.

    Parameters
    ----------
    lane : callable
        ``lane(j, take, results)`` calls ``take()`` for its next item (``None``: no
        item left, or the next is past another lane's failed item) and puts each
        result in ``results[index]`` as it comes; an exception it raises is the
        failure of the first item it took without a result.
    items : list of int
        The items' indices, increasing.
    lanes : int
        Lanes at once (at most one per item; one runs in the calling thread).

    Returns
    -------
    dict
        Every item's result.

    Raises
    ------
    BaseException
        The failure of the first failed item (in index order).
    """
    lanes = max(1, min(lanes, len(items)))
    results: dict[int, object] = {}
    failures: dict[int, BaseException] = {}
    taken: dict[int, list[int]] = {j: [] for j in range(lanes)}  # each lane's items
    queue = iter(items)
    lock = threading.Lock()

    def take(j: int) -> int | None:
        with lock:
            k = next(queue, None)
            if k is None or (failures and k > min(failures)):
                return None
            taken[j].append(k)
            return k

    def run(j: int) -> None:
        try:
            lane(j, lambda: take(j), results)
        except BaseException as error:  # noqa: BLE001 - raised in the caller's thread
            with lock:
                failures[min((k for k in taken[j] if k not in results), default=-1)] = error

    if lanes == 1:
        run(0)
    else:
        threads = [threading.Thread(target=run, args=(j,), daemon=True) for j in range(lanes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failures:
        raise failures[min(failures)]
    return results


def lane_devices(lane: int, per_lane: int, visible: str | None) -> str:
    """The GPUs lane ``lane`` sees (``CUDA_VISIBLE_DEVICES``): its own ``per_lane``
    of the job's ``visible`` ones (comma-separated ids or UUIDs, as Slurm sets them;
    ``None``: the node's, numbered from 0).

    Raises
    ------
    ConfigError
        When the job sees too few devices for this lane (one line).
    """
    asked = f"evaluation.gpus_per_evaluation {per_lane}"
    return _own_devices(lane, per_lane, visible, who=f"evaluation lane {lane}", asked=asked)


def lane_environment(lane: int, gpus_per_evaluation: int) -> dict[str, str]:
    """The variables lane ``lane`` sets in its children: its number, and its GPUs
    when ``gpus_per_evaluation`` asks for some."""
    environment = {"EVOCAMP_LANE": str(lane)}
    if gpus_per_evaluation:
        environment["CUDA_VISIBLE_DEVICES"] = lane_devices(
            lane, gpus_per_evaluation, os.environ.get("CUDA_VISIBLE_DEVICES")
        )
    return environment


@dataclass(frozen=True)
class Lane:
    """A Dask worker's lane that one task's evaluations run in (one at a time, in
    supervised children): its number in the worker and the GPUs it gets
    (``evaluation.gpus_per_evaluation``)."""

    number: int
    gpus: int = 0


_WORKER_LANES: set[int] = set()  # the lanes of this process that tasks hold
_WORKER_LOCK = threading.Lock()


@contextlib.contextmanager
def worker_lane(gpus: int) -> Iterator[Lane]:
    """The lowest lane of this process (a Dask worker) that no other task holds, held
    while the context lasts; ``gpus`` GPUs each (:func:`lane_environment`). A worker
    runs at most its threads' number of tasks at once, so its lanes are numbered
    below that, and below what its resources allow (``GPU``: its visible devices over
    ``gpus``)."""
    with _WORKER_LOCK:
        number = min(set(range(len(_WORKER_LANES) + 1)) - _WORKER_LANES)
        _WORKER_LANES.add(number)
    try:
        yield Lane(number, gpus)
    finally:
        with _WORKER_LOCK:
            _WORKER_LANES.discard(number)


def worker_devices(worker: int, per_worker: int, visible: str | None) -> str:
    """The GPUs Dask worker ``worker`` of a LocalCluster sees (its
    ``CUDA_VISIBLE_DEVICES``): its own ``per_worker`` of the segment job's ``visible``
    ones (``evaluation.concurrency`` x ``evaluation.gpus_per_evaluation``).

    Raises
    ------
    ConfigError
        When the job sees too few devices for this worker (one line).
    """
    asked = f"evaluation.concurrency x evaluation.gpus_per_evaluation: {per_worker} per worker"
    return _own_devices(worker, per_worker, visible, who=f"Dask worker {worker}", asked=asked)


def _own_devices(k: int, per: int, visible: str | None, *, who: str, asked: str) -> str:
    """The ``k``-th ``per`` devices of ``visible`` (``CUDA_VISIBLE_DEVICES``), those of
    ``who``; too few raise one line saying what ``asked`` for them."""
    devices = _devices(visible, (k + 1) * per)
    mine = devices[k * per : (k + 1) * per]
    if len(mine) < per:
        raise ConfigError(
            f"{who} needs GPUs {k * per}..{(k + 1) * per - 1} ({asked}) but the job sees "
            f"{len(devices)} (CUDA_VISIBLE_DEVICES={visible or ''})"
        )
    return ",".join(mine)


def _devices(visible: str | None, count: int) -> list[str]:
    """The devices of ``CUDA_VISIBLE_DEVICES`` ``visible`` (``None``: the node's,
    numbered from 0: ``count`` of them)."""
    if visible is None:
        return [str(k) for k in range(count)]
    return [device.strip() for device in visible.split(",") if device.strip()]
