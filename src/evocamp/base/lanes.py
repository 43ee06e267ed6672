"""Lanes: a shard's evaluations run ``n`` at once (``evaluation.concurrency``).

:func:`in_lanes` splits indexed items among ``lanes`` threads (lane ``j`` takes
the ``j``-th, ``(j + n)``-th, ``(j + 2n)``-th, ... of them, in order), each of which
drives its own supervised children (:mod:`evocamp.base.supervised`), and gathers
their results by index: whatever the number of lanes, the caller sees the results of one lane, and a
failure raised is that of the first failed item, every item before it done, as in
one lane. :func:`lane_devices` gives each lane its own GPUs from the job's visible
ones (``evaluation.gpus_per_evaluation``), which its children see in
``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from evocamp.base.errors import ConfigError

#: The variables a lane sets in its children (a program started there takes them).
LANE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "EVOCAMP_LANE")


def in_lanes(
    lane: Callable[[int, list[int], dict, Callable[[], int]], None], items: list[int], lanes: int
) -> dict[int, object]:
    """``items`` (increasing indices) done by ``lanes`` lanes at once; their results
    by index.

    Parameters
    ----------
    lane : callable
        ``lane(j, indices, results, until)`` does ``indices`` in order, putting each
        result in ``results[index]`` as it comes, and returns before an index past
        ``until()`` (another lane's item failed); an exception it raises is the
        failure of its first index without a result.
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
    beyond = items[-1] + 1 if items else 0  # past every item: no failure yet
    if lanes == 1:
        lane(0, list(items), results, lambda: beyond)
        return results
    failures: dict[int, BaseException] = {}
    lock = threading.Lock()

    def first_failure() -> int:
        with lock:
            return min(failures, default=beyond)

    def run(j: int) -> None:
        indices = items[j::lanes]
        try:
            lane(j, indices, results, first_failure)
        except BaseException as error:  # noqa: BLE001 - raised in the caller's thread
            with lock:
                failures[next(k for k in indices if k not in results)] = error

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
    devices = (
        [str(k) for k in range((lane + 1) * per_lane)]
        if visible is None
        else [device.strip() for device in visible.split(",") if device.strip()]
    )
    mine = devices[lane * per_lane : (lane + 1) * per_lane]
    if len(mine) < per_lane:
        raise ConfigError(
            f"evaluation lane {lane} needs GPUs {lane * per_lane}..{(lane + 1) * per_lane - 1} "
            f"(evaluation.gpus_per_evaluation {per_lane}) but the job sees {len(devices)} "
            f"(CUDA_VISIBLE_DEVICES={visible or ''})"
        )
    return ",".join(mine)


def lane_environment(lane: int, gpus_per_evaluation: int) -> dict[str, str]:
    """The variables lane ``lane`` sets in its children: its number, and its GPUs
    when ``gpus_per_evaluation`` asks for some."""
    environment = {"EVOCAMP_LANE": str(lane)}
    if gpus_per_evaluation:
        environment["CUDA_VISIBLE_DEVICES"] = lane_devices(
            lane, gpus_per_evaluation, os.environ.get("CUDA_VISIBLE_DEVICES")
        )
    return environment
