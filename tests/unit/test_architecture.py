"""The package's shape: layers that import only downwards, no import cycle, imports
inside functions only for heavy libraries (docs/architecture.md)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from evocamp.catalogue.algorithms import ALGORITHMS
from evocamp.catalogue.domains import DOMAINS

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "evocamp"

#: Bottom-up: a module may import from its own layer and the layers below it.
LAYERS = (
    ("base", ("evocamp.base",)),
    ("model", ("evocamp.model",)),
    ("tasks", ("evocamp.tasks",)),
    ("families", ("evocamp.families",)),
    ("catalogue", ("evocamp.catalogue",)),
    ("config", ("evocamp.config",)),
    ("files", ("evocamp.files",)),
    ("loop", ("evocamp.loop",)),
    ("executors", ("evocamp.executors",)),
    ("reporting", ("evocamp.reporting",)),
    ("results", ("evocamp.results",)),
    (
        "entry",
        (
            "evocamp.cli",
            "evocamp.cli_reference",
            "evocamp.warmstart",
            "evocamp.__main__",
            "evocamp.plugins",
        ),
    ),
)
#: Libraries whose import is slow enough to keep out of the short steps that do not
#: need them (pyribs and scikit-learn pull in scipy and pandas; jsonschema only
#: validates a campaign; statsmodels only corrects the campaign tables' p-values): the
#: only imports allowed inside functions.
HEAVY = {
    "ribs",
    "sklearn",
    "scipy",
    "statsmodels",
    "pandas",
    "matplotlib",
    "dask",
    "distributed",
    "gymnasium",
    "mujoco",
    "jsonschema",
    "psutil",
    "pyarrow",
    "ioh",
    "autorank",
}
#: evocamp's own imports inside functions, each for start-up time: the warm-start server
#: forks a child that runs the step (the client, ``python -m evocamp``, must not import
#: the steps it hands over), and a command imports only the layer it runs.
LATE_OWN_IMPORTS = {
    ("evocamp.warmstart", "evocamp.cli"),
    ("evocamp.cli", "evocamp.config"),
    ("evocamp.cli", "evocamp.executors.async_mode"),
    ("evocamp.cli", "evocamp.executors.dask_mode"),
    ("evocamp.cli", "evocamp.reporting.campaign_figures"),
    ("evocamp.cli", "evocamp.reporting.plotting"),
    ("evocamp.cli", "evocamp.reporting.status"),
    ("evocamp.cli", "evocamp.results"),
}


#: Standard-library modules the warm-start client leaves to the server's functions: every
#: pipeline step starts as that client, so each millisecond of its imports is paid once
#: per job (measured: 16 ms for the client's imports, 21 ms with these at the top).
LATE_FOR_THE_WARM_CLIENT = {"subprocess", "fcntl", "signal", "importlib", "threading", "traceback"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    name = ".".join(parts)
    return name.removesuffix(".__init__")


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(name: str) -> int:
    for number, (_, prefixes) in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return number
    raise AssertionError(f"module {name} belongs to no layer: add it to LAYERS")


def imports(path: Path) -> list[tuple[str, bool, int]]:
    """``(imported module, inside a function, line)`` for every import of a file."""
    tree = ast.parse(path.read_text())
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(id(sub) for sub in ast.walk(node) if sub is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [(name, id(node) in inside, node.lineno) for name in names]
    return found


def own_target(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name if name and name != "evocamp" else None


def edges() -> list[tuple[str, str, bool, int]]:
    known = modules()
    found = []
    for source, path in known.items():
        for imported, late, line in imports(path):
            target = own_target(imported, known)
            if target is not None and target != source:
                found.append((source, target, late, line))
    return found


def test_every_module_belongs_to_a_layer():
    for name in modules():
        if name != "evocamp":
            layer_of(name)


def test_modules_import_only_from_their_layer_and_below():
    upward = [
        f"{source} ({LAYERS[layer_of(source)][0]}) imports {target} "
        f"({LAYERS[layer_of(target)][0]}) at line {line}"
        for source, target, _, line in edges()
        if source != "evocamp" and layer_of(target) > layer_of(source)
    ]
    assert upward == []


def test_the_package_root_imports_nothing_of_its_own():
    assert [edge for edge in edges() if edge[0] == "evocamp"] == []


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for source, target, _, _ in edges():
        graph.setdefault(source, set()).add(target)
    visiting, done, cycles = set(), set(), []

    def visit(node: str, path: list[str]) -> None:
        visiting.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in visiting:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in done:
                visit(nxt, [*path, nxt])
        visiting.discard(node)
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            visit(node, [node])
    assert cycles == []


def optional_distributions() -> set[str]:
    """What the optional extras of the catalogue's entries install (``cma``, ``pymoo``,
    ``mujoco``, ...): a module that uses one imports it inside its functions, so that
    evocamp imports without the extra (a family from another library needs no line
    here)."""
    entries = (*ALGORITHMS.values(), *DOMAINS.values())
    return {name for e in entries if e.extra for name, _, _ in e.extra.requires}


def test_imports_inside_functions_are_heavy_libraries_only():
    late = []
    allowed = HEAVY | optional_distributions()
    known = modules()
    for source, path in known.items():
        for imported, inside, line in imports(path):
            if not inside:
                continue
            top = imported.split(".")[0]
            target = own_target(imported, known)
            if target is not None:
                if (source, target) not in LATE_OWN_IMPORTS:
                    late.append(f"{source}:{line} imports {imported} inside a function")
            elif top in LATE_FOR_THE_WARM_CLIENT and source == "evocamp.warmstart":
                continue
            elif top != "evocamp" and top not in allowed:
                late.append(f"{source}:{line} imports {imported} inside a function")
    assert late == []


@pytest.mark.parametrize("pair", sorted(LATE_OWN_IMPORTS))
def test_listed_late_imports_still_exist(pair):
    """An exception that is no longer needed is removed from the list."""
    assert any((source, target) == pair for source, target, late, _ in edges() if late)


#: pyribs' private attributes evocamp uses (its archives', emitters', evolution
#: strategies' and schedulers'): read and written in ``families/ribs_internals.py`` only.
RIBS_PRIVATE = {
    "_rng",
    "_store",
    "_props",
    "_fields",
    "_buffer",
    "_n_occupied",
    "_opt",
    "_solutions",
    "_initial_solutions",
    "_clip",
    "_cur_solutions",
    "_emitters",
    "_result_archive",
}


def test_only_ribs_internals_touches_pyribs_private_attributes():
    """No module but ``evocamp.families.ribs_internals`` names one of pyribs' private
    attributes, as ``x._name`` (``self._name`` is a class's own) or in ``getattr``,
    ``hasattr`` and ``setattr``."""
    found = []
    for source, path in modules().items():
        if source == "evocamp.families.ribs_internals":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in RIBS_PRIVATE
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")
            ):
                found.append(f"{source}:{node.lineno} .{node.attr}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in RIBS_PRIVATE
            ):
                found.append(f"{source}:{node.lineno} {node.func.id}({node.args[1].value!r})")
    assert found == []


def evaluation_walk(tmp_path: Path, algorithm: dict) -> tuple[list[str], list[str], int]:
    """The walk of a shard's evaluation: the evocamp modules entered, in order, from
    ``cli.cmd_evaluate`` to the domain's evaluation function (both included), with
    consecutive repeats collapsed; for the record, every call's module likewise; and
    how often the whole step resolved a batch format (``batch_format_of``).

    What counts as a stop: a module *entered*, that is, a Python-level ``call`` event
    (``sys.setprofile``: a function, method, lambda, comprehension, generator resumed,
    a dataclass's generated method) whose frame belongs to an ``evocamp`` module (its
    globals' ``__name__``) other than the module of the nearest ``evocamp`` frame below
    it on the stack (its caller, through any other library: contextlib, h5py, ...).
    A module calling its own functions stays where it is; a module a callee calls back
    (a lambda handed to another module) is entered again. No module is left out.
    Calls into other libraries (numpy, h5py, json, ...) are not stops. A real
    ``evaluate`` step runs in this process on the generation-0 checkpoint a real
    ``init`` wrote (a 20-d sphere, whose built-in evaluation function runs in this
    process).
    """
    from evocamp import cli
    from evocamp.config import run_spec, validate_config
    from evocamp.executors.steps import init_step
    from evocamp.model import protocol
    from evocamp.tasks import functions

    config = validate_config(
        {
            "campaign": "walk",
            "algorithms": {"a": algorithm},
            "domains": {"sphere": {"type": "sphere", "solution_dim": 20}},
            "shards": 2,
        }
    )
    checkpoint = tmp_path / "gen_000000.h5"
    init_step(spec=run_spec(config, algorithm="a", domain="sphere", seed=0), output=checkpoint)
    start, goal = cli.cmd_evaluate.__code__, functions.sphere.__code__
    resolving = protocol.batch_format_of.__code__
    entered: list[str] = []
    called: list[str] = []
    recording, resolved = False, 0

    def module_of(frame) -> str:
        name = frame.f_globals.get("__name__", "")
        return name if name.split(".")[0] == "evocamp" else ""

    def profile(frame, event, arg):
        nonlocal recording, resolved
        if event != "call":
            return
        resolved += frame.f_code is resolving
        if frame.f_code is start:
            recording = True
        module = module_of(frame) if recording else ""
        if not module:
            return
        caller = frame.f_back
        while caller is not None and not module_of(caller):
            caller = caller.f_back
        if frame.f_code is start or module_of(caller) != module:
            entered.append(module)
        called.append(module)
        if frame.f_code is goal:
            recording = False

    argv = ["evaluate", "--state", str(checkpoint), "--shard", "1", "--shards", "2"]
    sys.setprofile(profile)
    try:
        assert cli.main([*argv, "--output", str(tmp_path / "shard_1.h5")]) == 0
    finally:
        sys.setprofile(None)

    def collapsed(modules: list[str]) -> list[str]:
        return [m for k, m in enumerate(modules) if k == 0 or modules[k - 1] != m]

    walk = collapsed(entered)
    assert walk[0] == "evocamp.cli" and walk[-1] == "evocamp.tasks.functions", walk
    return walk, collapsed(called), resolved


def returns_of(walk: list[str]) -> list[str]:
    """The stops of a walk in a module it had already left."""
    return [module for k, module in enumerate(walk) if module in walk[:k]]


#: Stops of a shard's walk from the command to the domain's function, at most
#: (docs/architecture.md, "A shard's walk"): 12 since the evaluate step became the shard
#: step's own and the shard split the batch protocol's (14 before, 21 and 1 return before
#: the stops a shard does not need were cut, 28 and 6 before the calls of a slice moved
#: beside their outcomes, 26 and 10 before the run object).
WALK_STOPS = 12


@pytest.mark.parametrize(
    "algorithm",
    [
        {"type": "map_elites", "emitter_batch_size": 8},
        {"type": "openai_es", "popsize": 8},
    ],
    ids=["map_elites", "openai_es"],
)
def test_a_shards_evaluation_walk_is_short_and_never_returns(tmp_path, algorithm):
    """From ``cmd_evaluate`` to the domain's evaluation function in at most
    :data:`WALK_STOPS` stops, none in a module already left."""
    walk, calls, _ = evaluation_walk(tmp_path, algorithm)
    summary = (
        f"{len(walk)} stops, {len(returns_of(walk))} returns: {' > '.join(walk)}\n"
        f"(every call: {len(calls)} stops, {len(returns_of(calls))} returns)"
    )
    assert len(walk) <= WALK_STOPS, summary
    assert returns_of(walk) == [], summary


@pytest.mark.parametrize(
    ("algorithm", "made"),
    [
        ({"type": "map_elites", "emitter_batch_size": 8}, 0),
        (
            {
                "type": "plugin",
                "class": "my_es:CompactOnePlusLambda",
                "python_path": str(Path(__file__).parents[1] / "plugins"),
                "params": {"lam": 8},
            },
            1,
        ),
    ],
    ids=["built_in", "plugin"],
)
def test_an_evaluate_step_resolves_its_batch_format_once_at_most(tmp_path, algorithm, made):
    """The run object is resolved once per step: a built-in type's batch format is made
    once per process, with its catalogue entry (no ``batch_format_of`` in a whole
    ``evaluate`` step); a plugin's once in the step, when its class is imported and
    checked (it was two, and a call of ``batch_format`` in eight modules)."""
    _, _, resolved = evaluation_walk(tmp_path, algorithm)
    assert resolved == made
