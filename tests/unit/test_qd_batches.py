"""Issue 33: QD batches of Gaussian and iso-line emitters travel as their parents' cells
and the emitters' random states, and regenerate bit for bit what pyribs' own ask()
returns, whatever the slice; checkpoints hold no copy of the solutions."""

from __future__ import annotations

import copy
import json
import os
import pickle

import h5py
import numpy as np
import pytest

import evocamp  # noqa: F401 (numba's JIT off before pyribs loads)
from evocamp.base.errors import CorruptFileError
from evocamp.base.shard_views import ElitesAt
from evocamp.catalogue.factory import build_optimizer, resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.families.qd import ArchiveElites, QDBatch, compact_emitters
from evocamp.model.protocol import ELITES, shard_bounds

COMPACT_TYPES = ("map_elites", "map_elites_line", "cvt_map_elites", "cvt_map_elites_line")
#: Novelty search (NS) and with local competition (NSLC), each with Gaussian and
#: iso-line variation: parents sampled from its novelty archive.
NOVELTY = {
    f"{name}_{variation}": {
        "type": "novelty_search",
        "variation": variation,
        "archive": {"local_competition": name == "nslc"},
    }
    for name in ("ns", "nslc")
    for variation in ("gaussian", "iso_line")
}


def spec_of(algorithm: dict, *, dim: int = 5, bounds=None) -> dict:
    domain = {"type": "sphere", "solution_dim": dim}
    if bounds is not None:
        domain["bounds"] = bounds
    config = validate_config(
        {"algorithms": {"a": algorithm}, "domains": {"d": domain}, "shards": 1}
    )
    return run_spec(config, algorithm="a", domain="d", seed=3)


def results_of(solutions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A sphere-like objective and two measures spread over the archive's range."""
    objective = -np.sum(solutions**2, axis=1)
    measures = np.tanh(solutions[:, :2] * 30.0) * 12.0
    return objective, measures


def shard_mode_start(tmp_path, algorithm: dict, *, dim: int, every: int, seed: int):
    """A run of ``algorithm`` on the ``dim``-d sphere (3 shards, 20 generations, kept
    every ``every``): its working folder with the generation-0 state written, and the
    same state in memory."""
    from evocamp.catalogue.factory import resolve_run
    from evocamp.files.checkpoint import write_state
    from evocamp.loop.engine import initialise

    config = validate_config(
        {
            "algorithms": {"a": algorithm},
            "domains": {"d": {"type": "sphere", "solution_dim": dim}},
            "shards": 3,
            "checkpoint_every": every,
            "generations": 20,
        }
    )
    spec = run_spec(config, algorithm="a", domain="d", seed=seed)
    work = tmp_path / "work"
    write_state(work / "state_000000.h5", initialise(spec), run=resolve_run(spec))
    return work, initialise(spec)


def shards_made_as(expected: list, *, state, files: list) -> None:
    """Run the shard steps of the batch of the state file ``state`` into ``files`` (one
    shard each) and check each shard's objectives and measures against ``expected``'s,
    bit for bit."""
    from evocamp.executors.steps import evaluate_step
    from evocamp.files.shard import read_shard

    for shard, path in enumerate(files):
        evaluate_step(state=state, shard=shard, shards=len(files), output=path)
        made = read_shard(path)
        assert made.objective.tobytes() == expected[shard].objective.tobytes()
        assert made.measures.tobytes() == expected[shard].measures.tobytes()


def told_from_files(work, memory, *, generations: int):
    """Shard mode without the node-local cache (3 shards, 20 generations in all): after
    each generation's shard steps (their results checked against the in-memory run's,
    :func:`shards_made_as`) and tell step, yields the state file written and the
    in-memory run told the same."""
    from conftest import shard_results

    from evocamp.executors.steps import tell_step
    from evocamp.loop.engine import tell
    from evocamp.loop.state_cache import forget_run

    previous = work / "state_000000.h5"
    for generation in range(1, generations + 1):
        expected = shard_results(memory, 3)
        files = [work / f"gen_{generation}" / f"shard_{shard}.h5" for shard in range(3)]
        forget_run(work)  # every shard reads from the files alone
        shards_made_as(expected, state=previous, files=files)
        output = work / f"state_{generation:06d}.h5"
        tell_step(state=previous, shard_files=[str(p) for p in files], output=output, total=20)
        memory = tell(memory, expected)
        yield output, memory
        previous = output


def regenerated(optimizer, batch: dict, start: int, stop: int) -> np.ndarray:
    parents = ArchiveElites(optimizer.parent_archive)
    return QDBatch.solutions({**batch, ELITES: parents}, start, stop)


@pytest.mark.parametrize("kind", COMPACT_TYPES + tuple(NOVELTY))
@pytest.mark.parametrize("bounds", [None, [-1.0, 1.0]])
def test_every_slice_is_what_pyribs_asks(kind, bounds):
    """Five generations (novelty search: eight, its novelty archive filling and, with
    local competition, replacing entries) of two emitters (the first from x0, the
    next from an archive filling up): every shard's slice for 1, 3 and 7 shards, and a
    slice across the two emitters, equal pyribs' own ask() of the same scheduler byte
    for byte; the entries a novelty archive's tell changed are those noted."""
    algorithm = {**NOVELTY.get(kind, {"type": kind}), "emitters": 2, "emitter_batch_size": 7}
    if kind.startswith("cvt"):
        algorithm["archive"] = {"cells": 20, "cvt_samples": 2000}
    optimizer = build_optimizer(spec_of(algorithm, bounds=bounds))
    replaced = 0
    for generation in range(8 if kind in NOVELTY else 5):
        expected = np.asarray(copy.deepcopy(optimizer.scheduler).ask(), dtype=np.float64)
        batch = optimizer.ask()
        assert isinstance(batch, dict) and QDBatch.size(batch) == 14, generation
        assert ("x0" in batch) == (generation == 0)
        for shards in (1, 3, 7):
            for shard in range(shards):
                start, stop = shard_bounds(14, shards, shard)
                made = regenerated(optimizer, batch, start, stop)
                assert made.tobytes() == expected[start:stop].tobytes(), (generation, shard)
        assert regenerated(optimizer, batch, 5, 9).tobytes() == expected[5:9].tobytes()
        entries = copy.deepcopy(optimizer.parent_archive.data())
        optimizer.tell(*results_of(expected))
        if kind in NOVELTY:
            now = optimizer.parent_archive.data()
            count = len(entries["index"])
            changed = np.flatnonzero(
                (now["solution"][:count] != entries["solution"]).any(axis=1)
            ).tolist() + list(range(count, len(now["index"])))
            assert optimizer.inserted.tolist() == changed, generation
            replaced += int(np.sum(optimizer.inserted < count))
    assert len(optimizer.archive) > 1
    if kind in NOVELTY:  # only local competition replaces (here: with Gaussian variation)
        assert (replaced > 0) == (kind == "nslc_gaussian")


@pytest.mark.parametrize(("dim", "stride"), [(5, 1), (700, 5), (5000, 1)])
def test_slices_between_recorded_states_are_what_pyribs_asks(dim, stride, monkeypatch):
    """States recorded every few rows (``row_stride``: 5 at 700 parameters, none
    stored at 5,000, where every row has its state) or, as batches written before the
    stride, every row (``_STRIDE_VALUES`` 1, the ``(5, 1)`` case): every slice of two
    iso-line emitters of 13, for 1, 3 and 7 shards, is pyribs' ask byte for byte."""
    from evocamp.families.qd import compact

    if dim == 5:
        monkeypatch.setattr(compact, "_STRIDE_VALUES", 1)
    algorithm = {"type": "map_elites_line", "emitters": 2, "emitter_batch_size": 13}
    optimizer = build_optimizer(spec_of(algorithm, dim=dim))
    for generation in range(3):
        expected = np.asarray(copy.deepcopy(optimizer.scheduler).ask(), dtype=np.float64)
        batch = optimizer.ask()
        assert int(batch.get("row_stride", 1)) == stride
        assert len(batch["row_state"]) == 2 * (-(-13 // stride) + 1)
        for shards in (1, 3, 7):
            for shard in range(shards):
                start, stop = shard_bounds(26, shards, shard)
                made = regenerated(optimizer, batch, start, stop)
                assert made.tobytes() == expected[start:stop].tobytes(), (generation, shard)
        optimizer.tell(*results_of(expected))


def test_a_shard_needs_only_its_parents_and_a_pickle_no_solutions():
    """A shard's slice is made from the elites of its own parents' cells (ElitesAt
    holds no other), checked against the digests the batch stores; the pickled
    optimizer between ask and tell holds no copy of the batch, and a restored one
    tells exactly as the original, regenerating only the rows its archive can take."""
    spec = spec_of({"type": "map_elites", "emitter_batch_size": 64}, dim=400)
    optimizer = build_optimizer(spec)
    for _ in range(3):
        batch = optimizer.ask()
        optimizer.tell(*results_of(regenerated(optimizer, batch, 0, 64)))
    batch = optimizer.ask()
    whole = regenerated(optimizer, batch, 0, 64)
    kind = resolve_run(spec).batch_format
    assert kind.reads_elites
    cells = kind.elites_read(batch, 10, 20)
    assert 0 < len(cells) <= 10
    held = ElitesAt(cells, ArchiveElites(optimizer.archive)[cells])
    assert QDBatch.solutions({**batch, ELITES: held}, 10, 20).tobytes() == whole[10:20].tobytes()
    with pytest.raises(IndexError, match="is not among the cells held"):
        QDBatch.solutions({**batch, ELITES: held}, 0, 64)
    changed = held.solutions.copy()
    changed[-1, 7] += 1e-12
    with pytest.raises(CorruptFileError) as caught:
        QDBatch.solutions({**batch, ELITES: ElitesAt(cells, changed)}, 10, 20)
    assert str(caught.value) == (
        f"the elite read for cell {cells[-1]} is not the parent this batch was made from "
        "(the run's working states are inconsistent); delete the run's work/state_*.h5 "
        "and work/gen_* after its last kept checkpoint and rerun"
    )
    blob = pickle.dumps(optimizer)
    assert not any(row.tobytes() in blob for row in whole)
    restored = pickle.loads(blob)
    assert restored.scheduler._cur_solutions is None
    objective, measures = results_of(whole)
    objective[[3, 4, 40]] = 1.0  # better than any elite: these rows are inserted
    optimizer.tell(objective, measures)
    restored.tell(objective, measures)
    told = restored.scheduler._cur_solutions  # only the rows the archive could take
    made = ~np.isnan(told).all(axis=1)
    assert made[[3, 4, 40]].all() and not made[:3].any() and not made[41:].any()
    assert told[made].tobytes() == whole[made].tobytes()
    mine, theirs = optimizer.archive.data(), restored.archive.data()
    assert all(np.array_equal(mine[name], theirs[name]) for name in mine)
    assert len(optimizer.inserted) and np.array_equal(restored.inserted, optimizer.inserted)


def test_batches_with_blake2b_digests_are_still_checked():
    """A batch written before ``parent_sum`` (its parents' blake2b ``parent_digest``)
    regenerates the same rows and still stops at a wrong parent; the check sum that
    replaced it changes with any one parameter's lowest bit."""
    from evocamp.families.qd.batches import _digests
    from evocamp.families.qd.batches import check_sums as _sums

    optimizer = build_optimizer(spec_of({"type": "map_elites", "emitter_batch_size": 16}, dim=50))
    for _ in range(3):
        batch = optimizer.ask()
        optimizer.tell(*results_of(regenerated(optimizer, batch, 0, 16)))
    batch = optimizer.ask()
    whole = regenerated(optimizer, batch, 0, 16)
    cells = batch.pop("parent_cells")
    parents = ArchiveElites(optimizer.archive)[cells]
    assert batch.pop("parent_sum").tobytes() == _sums(parents).tobytes()
    old = {**batch, "parent_cells": cells, "parent_digest": _digests(parents)}
    assert regenerated(optimizer, old, 0, 16).tobytes() == whole.tobytes()
    changed = parents.copy()
    changed[0, 49] = np.nextafter(changed[0, 49], np.inf)
    with pytest.raises(CorruptFileError, match=f"the elite read for cell {cells[0]} is not"):
        QDBatch.solutions({**old, ELITES: ElitesAt(cells, changed)}, 0, 16)
    for row, column in ((0, 0), (len(cells) - 1, 49)):
        flipped = parents.copy()
        flipped.view(np.uint64)[row, column] ^= np.uint64(1)
        assert (_sums(flipped) != _sums(parents)).tolist() == [i == row for i in range(len(cells))]


def test_other_qd_types_keep_plain_batches():
    """Types whose emitters learn on an archive whose entries move (dominated novelty
    search) or adapt a full covariance (CMA-ME) keep their batches plain."""
    for algorithm in ({"type": "dominated_novelty_search"}, {"type": "cma_me"}):
        optimizer = build_optimizer(spec_of(algorithm))
        assert compact_emitters(optimizer.scheduler) is None
        assert isinstance(optimizer.ask(), np.ndarray)


def test_shards_read_their_parents_from_the_window_states(tmp_path, monkeypatch):
    """Shard mode: light states hold no solutions, only the elites their generation
    inserted; a shard reads its parents from them and the window's whole state (no
    node-local cache needed), and makes exactly the in-memory run's shard results; on
    the tell's node it reads its rows from the cache, for that very file only. A light
    state without its inserted elites is named; after one (written by an earlier
    version) the next state is written whole."""
    from conftest import shard_results

    from evocamp.executors.steps import evaluate_step, tell_step
    from evocamp.files.shard import read_shard, write_shard
    from evocamp.loop.state_cache import forget_run, read_full_state

    monkeypatch.setenv("EVOCAMP_STATE_CACHE", str(tmp_path / "cache"))
    algorithm = {"type": "map_elites_line", "emitters": 2, "batch_size": 6}
    work, start = shard_mode_start(tmp_path, algorithm, dim=6, every=10, seed=1)
    for previous, memory in told_from_files(work, start, generations=5):
        with h5py.File(previous, "r") as handle:
            assert "optimizer" not in handle and "solutions" not in handle["next_batch"]
            assert handle["inserted/index"][()].tolist() == memory.optimizer.inserted.tolist()
    # The tell cached its batch's solutions on this node: the next tell there starts
    # with them (pyribs' own rows, bit for bit: none regenerated) and a shard reads its
    # rows there, not the file (zeroed on disk with the same identity).
    asked = read_full_state(previous).optimizer.asked_solutions()
    assert asked.tobytes() == memory.optimizer.asked_solutions().tobytes()
    status, content = previous.stat(), previous.read_bytes()
    previous.write_bytes(bytes(len(content)))
    os.utime(previous, ns=(status.st_atime_ns, status.st_mtime_ns))
    evaluate_step(state=previous, shard=2, shards=3, output=tmp_path / "cached.h5")
    made, expected = read_shard(tmp_path / "cached.h5"), shard_results(memory, 3)[2]
    assert made.objective.tobytes() == expected.objective.tobytes()
    (entry,) = (tmp_path / "cache").glob(f"*/{previous.stem}.rows")
    os.truncate(entry, entry.stat().st_size - 8)  # a damaged entry is not used
    with pytest.raises(CorruptFileError, match="is corrupt or truncated"):
        evaluate_step(state=previous, shard=2, shards=3, output=tmp_path / "cached.h5")
    previous.write_bytes(content)  # the file again: another identity, the entry is not used
    with h5py.File(previous, "r+") as handle:
        del handle["inserted"]
    with pytest.raises(CorruptFileError) as caught:
        evaluate_step(state=previous, shard=0, shards=3, output=tmp_path / "x.h5")
    assert str(caught.value).startswith(
        "run a/d/seed1, generation 6: the parents of its batch (stored in "
        f"{previous}) cannot be read: {previous} has no /inserted; "
    )
    forget_run(work)
    state = read_full_state(work / "state_000004.h5")  # rebuilt: no /inserted needed
    files = []
    for result in shard_results(state, 3):
        files.append(tmp_path / f"again_{result.shard}.h5")
        write_shard(files[-1], result)
    with h5py.File(work / "state_000004.h5", "r+") as handle:
        del handle["inserted"]
    tell_step(
        state=work / "state_000004.h5",
        shard_files=[str(p) for p in files],
        output=tmp_path / "after.h5",
        total=20,
    )
    with h5py.File(tmp_path / "after.h5", "r") as handle:
        assert "optimizer" in handle, "written whole after a light state without /inserted"


@pytest.mark.parametrize(
    "kind", ["cma_me", "cvt_cma_me", "cma_mae", "cvt_cma_mae", "density_descent"]
)
def test_separable_cma_es_batches_are_compact_without_bounds(kind):
    """CMA-ME, CMA-MAE and density descent (whose result archive is not the one the
    emitters learn on, a density archive for the latter: no matter, they read no
    parents) with pyribs' separable CMA-ES and no bounds:
    batches are compact (the ES's
    mean, scale and row states), every slice of 1, 3 and 7 shards is pyribs' own ask()
    byte for byte, and an optimizer pickled between ask and tell holds no copy of the
    batch (nor does its ES) and tells and asks on exactly as the original. With bounds
    (pyribs redraws rows out of them) batches stay plain."""
    algorithm = {"type": kind, "emitters": 2, "emitter_batch_size": 7, "es": "sep_cma_es"}
    if kind.startswith("cvt"):
        algorithm["archive"] = {"cells": 20, "cvt_samples": 2000}
    optimizer = build_optimizer(spec_of(algorithm, dim=30))
    for generation in range(4):
        expected = np.asarray(copy.deepcopy(optimizer.scheduler).ask(), dtype=np.float64)
        batch = optimizer.ask()
        assert isinstance(batch, dict) and batch["es_mean"].shape == (2, 30), generation
        for shards in (1, 3, 7):
            for shard in range(shards):
                start, stop = shard_bounds(14, shards, shard)
                made = regenerated(optimizer, batch, start, stop)
                assert made.tobytes() == expected[start:stop].tobytes(), (generation, shard)
        restored = pickle.loads(pickle.dumps(optimizer))
        # (Not the bytes of each row in the pickle: an archive's unoccupied cells hold
        # whatever memory numpy reused, sometimes a freed copy of the batch.)
        assert restored.scheduler._cur_solutions is None
        assert all(e._opt._solutions is None for e in restored.scheduler.emitters)
        assert optimizer.scheduler._cur_solutions is not None  # the original is untouched
        objective, measures = results_of(expected)
        results = objective + 100.0, measures  # above CMA-MAE's threshold_min (0)
        optimizer.tell(*results)
        restored.tell(*results)
        mine, theirs = optimizer.archive.data(), restored.archive.data()
        assert all(np.array_equal(mine[name], theirs[name]) for name in mine)
        pairs = zip(optimizer.scheduler.emitters, restored.scheduler.emitters, strict=True)
        for one, other in pairs:
            assert one._opt.mean.tobytes() == other._opt.mean.tobytes()
            assert one._opt.cov.cov.tobytes() == other._opt.cov.cov.tobytes()
        assert restored.ask()["row_state"].tobytes() == optimizer.ask()["row_state"].tobytes()
        optimizer.tell(*results)  # the next generation asks after a tell
        restored.tell(*results)
    bounded = build_optimizer(spec_of(algorithm, dim=30, bounds=[-1.0, 1.0]))
    assert compact_emitters(bounded.scheduler) is None


@pytest.mark.parametrize("kind", ["cvt_cma_me", "density_descent"])
def test_separable_cma_es_runs_the_shard_steps_from_files_alone(tmp_path, monkeypatch, kind):
    """Shard mode with CVT-CMA-ME or density descent (separable CMA-ES, no bounds) and no
    node-local cache: every shard regenerates its rows and every tell rebuilds its state
    from the window's kept checkpoint and shard files, whose batches are compact; every
    shard's results and the kept checkpoint's archive are the in-memory run's, and no
    state holds the batch's solutions."""
    from conftest import shard_results

    from evocamp.executors.steps import evaluate_step, tell_step
    from evocamp.files.shard import read_shard
    from evocamp.loop.engine import tell
    from evocamp.loop.state_cache import forget_run, read_full_state

    monkeypatch.setenv("EVOCAMP_STATE_CACHE", str(tmp_path / "cache"))
    algorithm = {"type": kind, "es": "sep_cma_es", "emitters": 2, "emitter_batch_size": 6}
    if kind == "cvt_cma_me":
        algorithm["archive"] = {"cells": 30, "cvt_samples": 2000}
    work, memory = shard_mode_start(tmp_path, algorithm, dim=40, every=3, seed=2)
    previous = work / "state_000000.h5"
    for generation in range(1, 6):
        expected = shard_results(memory, 3)
        files = [work / f"gen_{generation}" / f"shard_{shard}.h5" for shard in range(3)]
        forget_run(work)  # the shards and the tell read the files alone
        for shard, path in enumerate(files):
            evaluate_step(state=previous, shard=shard, shards=3, output=path)
            made = read_shard(path)
            assert made.objective.tobytes() == expected[shard].objective.tobytes()
        output = work / f"state_{generation:06d}.h5"
        tell_step(state=previous, shard_files=[str(p) for p in files], output=output, total=20)
        memory = tell(memory, expected)
        with h5py.File(output, "r") as handle:
            assert "solutions" not in handle["next_batch"] and "es_mean" in handle["next_batch"]
            blob = handle["optimizer/pickle"][()].tobytes() if "optimizer" in handle else b""
        solutions = np.asarray(memory.optimizer.scheduler._cur_solutions)
        assert not any(row.tobytes() in blob for row in solutions)
        previous = output
    with h5py.File(work / "state_000003.h5", "r") as handle:
        assert "optimizer" in handle  # the kept checkpoint the rebuilds start from
    forget_run(work)
    rebuilt = read_full_state(previous)
    assert len(memory.archive) > 1
    mine, theirs = rebuilt.archive.data(), memory.archive.data()
    assert all(np.array_equal(mine[name], theirs[name]) for name in theirs)
    assert rebuilt.next_batch["row_state"].tobytes() == memory.next_batch["row_state"].tobytes()


@pytest.mark.parametrize("kind", ["ns_gaussian", "nslc_iso_line"])
def test_novelty_search_runs_the_shard_steps_from_files_alone(tmp_path, monkeypatch, kind):
    """Shard mode with novelty search (NS, NSLC) and no node-local cache: every shard
    reads its parents, entries of the novelty archive, from the window's whole state
    (``/optimizer/rows/archive``) and the light states' ``/inserted`` (the entries
    each generation appended or replaced) and makes the in-memory run's results; every
    tell rebuilds its state from the window's kept checkpoint and continues bit for
    bit (archives, novelty archive, next batch); no state holds a batch's solutions."""
    from conftest import shard_results

    from evocamp.executors.steps import tell_step
    from evocamp.loop.engine import tell
    from evocamp.loop.state_cache import forget_run, read_full_state

    monkeypatch.setenv("EVOCAMP_STATE_CACHE", str(tmp_path / "cache"))
    algorithm = {**NOVELTY[kind], "emitters": 2, "emitter_batch_size": 6}
    work, memory = shard_mode_start(tmp_path, algorithm, dim=8, every=3, seed=4)
    previous = work / "state_000000.h5"
    replaced = 0
    for generation in range(1, 7):
        expected = shard_results(memory, 3)
        files = [work / f"gen_{generation}" / f"shard_{shard}.h5" for shard in range(3)]
        entries = len(memory.optimizer.parent_archive)
        forget_run(work)  # the shards and the tell read the files alone
        shards_made_as(expected, state=previous, files=files)
        output = work / f"state_{generation:06d}.h5"
        tell_step(state=previous, shard_files=[str(p) for p in files], output=output, total=20)
        memory = tell(memory, expected)
        replaced += int(np.sum(memory.optimizer.inserted < entries))
        with h5py.File(output, "r") as handle:
            assert "parents" in handle["next_batch"] and "solutions" not in handle["next_batch"]
            if "optimizer" not in handle:
                inserted = memory.optimizer.inserted
                assert handle["inserted/index"][()].tolist() == inserted.tolist()
                entries = ArchiveElites(memory.optimizer.parent_archive)[inserted]
                assert handle["inserted/solution"][()].tobytes() == entries.tobytes()
            blob = handle["optimizer/pickle"][()].tobytes() if "optimizer" in handle else b""
        assert not any(row.tobytes() in blob for row in memory.optimizer.asked_solutions())
        previous = output
    with h5py.File(work / "state_000003.h5", "r") as handle:
        assert "optimizer" in handle and "archive/solution" in handle["optimizer/rows"]
    forget_run(work)
    rebuilt = read_full_state(previous)
    for mine, theirs in (
        (rebuilt.archive, memory.archive),
        (rebuilt.optimizer.parent_archive, memory.optimizer.parent_archive),
    ):
        mine, theirs = mine.data(), theirs.data()
        assert all(np.array_equal(mine[name], theirs[name]) for name in theirs)
    # NS appends entries after the first generation's 12; NSLC here replaces them.
    assert (len(memory.optimizer.parent_archive) > 12) == (kind == "ns_gaussian")
    assert (replaced > 0) == (kind == "nslc_iso_line")
    assert rebuilt.next_batch["row_state"].tobytes() == memory.next_batch["row_state"].tobytes()
    assert rebuilt.next_batch["parents"].tobytes() == memory.next_batch["parents"].tobytes()


def test_a_shard_elsewhere_opens_only_the_states_holding_its_parents(tmp_path, monkeypatch):
    """A light state names, for each elite changed since the window's whole state, the
    light state of the window that holds it now (its window): each named row is the
    in-memory archive's elite, and a shard without the node-local cache reads its
    parents from those states and the whole one only (the window's other light states
    deleted: the shards still make exactly the in-memory run's results)."""
    from conftest import shard_results

    from evocamp.loop.state_cache import forget_run

    monkeypatch.setenv("EVOCAMP_STATE_CACHE", str(tmp_path / "cache"))
    algorithm = {"type": "map_elites", "emitters": 2, "batch_size": 6}
    work, start = shard_mode_start(tmp_path, algorithm, dim=6, every=10, seed=3)
    *_, (previous, memory) = told_from_files(work, start, generations=7)
    with h5py.File(previous, "r") as handle:
        group = handle["inserted"]
        cells, holders = group["window_cells"][()], group["window_holder"][()]
        names, whole = json.loads(group.attrs["window_files"]), group.attrs["window_whole"]
    assert names[0] == previous.name and whole == "state_000000.h5"
    elites = ArchiveElites(memory.archive)[cells]
    for cell, holder, elite in zip(cells.tolist(), holders.tolist(), elites, strict=True):
        with h5py.File(work / names[holder], "r") as handle:
            row = handle["inserted/index"][()].tolist().index(cell)
            assert handle["inserted/solution"][row].tobytes() == elite.tobytes()
    unnamed = [
        path
        for path in work.glob("state_0000*.h5")
        if path.name not in names and path.name != whole
    ]
    assert unnamed, "every light state holds a changed elite: nothing to show"
    for path in unnamed:
        path.unlink()
    forget_run(work)
    again = [tmp_path / f"again_{shard}.h5" for shard in range(3)]
    shards_made_as(shard_results(memory, 3), state=previous, files=again)


def test_the_three_elites_by_cell_are_one_protocol_and_give_the_same_rows(tmp_path, monkeypatch):
    """``batch[ELITES]`` is an :class:`ElitesByCell`: the archive in memory
    (``ArchiveElites``), the states on disk (``StoredElites``) and the cells a Dask task
    was sent (``ElitesAt``) satisfy it and give the same rows for the same cells."""
    from evocamp.files.checkpoint import StoredElites
    from evocamp.model.protocol import ElitesByCell

    monkeypatch.setenv("EVOCAMP_STATE_CACHE", str(tmp_path / "cache"))
    algorithm = {"type": "map_elites", "emitters": 2, "emitter_batch_size": 6}
    work, start = shard_mode_start(tmp_path, algorithm, dim=6, every=10, seed=3)
    *_, (previous, memory) = told_from_files(work, start, generations=4)
    with h5py.File(previous, "r") as handle:
        cells = np.unique(handle["inserted/window_cells"][()])
    assert len(cells)
    in_memory = ArchiveElites(memory.archive)
    views = [in_memory, StoredElites(previous), ElitesAt(cells, in_memory[cells])]
    for view in views:
        assert isinstance(view, ElitesByCell)
        assert view[cells].tobytes() == in_memory[cells].tobytes()
