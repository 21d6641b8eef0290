"""The architecture's one rule, read from the sources: each part of omni_sfp imports only the parts below it
(docs/architecture.md, "The rule"), and inside ``run/`` each layer only the layers below it. Every import counts:
module-level, inside a function (lazy) or under ``if TYPE_CHECKING:``, so no kind of import can hide an upward
dependency; and the graph of all of them has no circle of any length, inside a part or between parts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "omni_sfp"

# part -> the parts it may import. The entry points (omni_sfp/__init__.py, train.py, list_tasks.py, schema.py)
# sit on top and may import any part. omni_sfp.tasks is the repository's tasks/ (the embedded tasks).
CORE = ("config", "compute", "sfp", "envs", "ppo", "tasks")
ALLOWED: dict[str, frozenset[str]] = {
    "config": frozenset(),
    "tasks": frozenset(),
    "compute": frozenset({"config"}),
    "sfp": frozenset({"config", "compute"}),
    "envs": frozenset({"config", "compute", "sfp"}),
    "ppo": frozenset(CORE) - {"ppo"},
    "run": frozenset(CORE),
    "kit": frozenset({"config", "envs"}),  # Kit starts without torch: training is a subprocess
    "bench": frozenset({*CORE, "run", "face"}),
}
ENTRY_POINTS = ("train", "list_tasks", "schema")
# inside run/: config <- compose <- outputs <- runner <- train. A run module imports run modules of lower layers
# only (the outputs also import each other's base); train.py, the entry point, sits on top.
RUN_LAYERS: dict[str, int] = {
    "compose": 0,
    "checkpoint": 0,
    "progress": 0,
    "folder": 1,
    "outputs": 1,
    "sweep": 1,
    "runner": 2,
}


def module_name(path: Path) -> str:
    if path.is_relative_to(ROOT / "tasks"):
        parts = ("omni_sfp", "tasks", *path.relative_to(ROOT / "tasks").with_suffix("").parts)
    else:
        parts = ("omni_sfp", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """``omni_sfp.run.outputs.video`` -> ``run``; the package face ``omni_sfp`` -> ``face``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "face"
    return "entry" if parts[1] in ENTRY_POINTS else parts[1]


def imports_of(source: str, path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, imported omni_sfp module)`` for each import in ``source``, wherever it stands (module level,
    a function, ``if TYPE_CHECKING:``); ``from omni_sfp import x`` names the submodule x where x is one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "omni_sfp"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from .base import x
                base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "omni_sfp":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if is_module(sub) else target))
    return found


def is_module(name: str) -> bool:
    parts = name.split(".")[1:]
    if parts[:1] == ["tasks"]:
        base = ROOT / "tasks" / Path(*parts[1:]) if parts[1:] else ROOT / "tasks"
    else:
        base = PACKAGE / Path(*parts) if parts else PACKAGE
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tasks").rglob("*.py")])


def run_layer(module: str) -> tuple[int, str] | None:
    """``omni_sfp.run.outputs.video`` -> ``(1, "outputs")``; None outside run/ (and for the package itself)."""
    parts = module.split(".")
    if parts[:2] != ["omni_sfp", "run"] or len(parts) < 3:
        return None
    return RUN_LAYERS[parts[2]], parts[2]


def violations(files: dict[Path, str]) -> list[str]:
    """``path:line: part imports module (its part)`` for each import the rule forbids, in ``{path: source}``."""
    found = []
    for path, source in files.items():
        module = module_name(path)
        part = part_of(module)
        if part in ("entry", "face"):
            continue
        for line, target in imports_of(source, path, module):
            other = part_of(target)
            if other != part and other not in ALLOWED[part]:
                found.append(f"{path.relative_to(ROOT)}:{line}: {part} imports {target} ({other})")
            here, there = run_layer(module), run_layer(target)
            if here and there and there[1] != here[1] and there[0] >= here[0]:
                found.append(f"{path.relative_to(ROOT)}:{line}: run.{here[1]} imports {target} (a layer not below)")
    return found


def import_graph(files: dict[Path, str]) -> dict[str, set[str]]:
    """module -> the omni_sfp modules it imports, every kind of import counted."""
    graph: dict[str, set[str]] = {}
    for path, source in files.items():
        module = module_name(path)
        graph.setdefault(module, set()).update(t for _, t in imports_of(source, path, module) if t != module)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle ``[a, b, ..., a]`` per strongly connected set of modules (Tarjan), of any length."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = set()
            while True:
                member = stack.pop()
                members.add(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(_walk(graph, members))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _walk(graph: dict[str, set[str]], members: set[str]) -> list[str]:
    """A circle through a strongly connected set: follow edges inside it from its first member until one repeats."""
    trail = [min(members)]
    while True:
        nxt = min(m for m in graph[trail[-1]] if m in members)
        if nxt in trail:
            return [*trail[trail.index(nxt) :], nxt]
        trail.append(nxt)


def test_every_part_imports_only_the_parts_below_it():
    assert violations({path: path.read_text() for path in sources()}) == []


def test_the_rule_catches_a_lower_part_importing_a_higher_one():
    """The check itself: the cache importing the runner, even lazily inside a function, is reported."""
    cache = PACKAGE / "sfp" / "cache.py"
    late = cache.read_text() + "\n\ndef _late():\n    from omni_sfp.run import runner\n"
    found = violations({cache: late})
    assert len(found) == 1 and found[0].endswith("sfp imports omni_sfp.run.runner (run)"), found
    assert violations({PACKAGE / "kit" / "panel_model.py": "import omni_sfp.ppo.agent\n"})  # Kit: no torch


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_each_part_is_a_subpackage_whose_docstring_says_what_it_owns(part):
    init = ROOT / "tasks" / "__init__.py" if part == "tasks" else PACKAGE / part / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc and len(doc.split()) >= 12, f"{init.relative_to(ROOT)}: a docstring saying what the part owns"


def test_the_import_graph_has_no_circle():
    found = circles(import_graph({path: path.read_text() for path in sources()}))
    assert found == [], "import circles: " + "; ".join(" -> ".join(circle) for circle in found)


def test_a_circle_planted_in_run_is_found_through_a_lazy_or_type_checking_import():
    """The check itself, on a copy of the sources: run.outputs.base importing the runner, lazily inside a function
    or only for type checking, closes runner -> outputs.base -> runner; and the layer rule names the edge."""
    files = {path: path.read_text() for path in sources()}
    base = PACKAGE / "run" / "outputs" / "base.py"
    assert circles(import_graph(files)) == []
    plants = (
        "\n\ndef _late():\n    from omni_sfp.run.runner import Runner\n",
        "\nif TYPE_CHECKING:\n    from omni_sfp.run import runner\n",
    )
    for plant in plants:
        planted = {**files, base: files[base] + plant}
        assert ["omni_sfp.run.outputs.base", "omni_sfp.run.runner", "omni_sfp.run.outputs.base"] in circles(
            import_graph(planted)
        )
        assert any("run.outputs imports omni_sfp.run.runner (a layer not below)" in v for v in violations(planted))


def test_a_circle_of_any_length_is_found():
    modules = {
        PACKAGE / "run" / f"{name}.py": f"from omni_sfp.run import {nxt}\n"
        for name, nxt in (("compose", "folder"), ("folder", "runner"), ("runner", "compose"))
    }
    assert circles(import_graph(modules)) == [
        ["omni_sfp.run.compose", "omni_sfp.run.folder", "omni_sfp.run.runner", "omni_sfp.run.compose"]
    ]
    assert circles(
        import_graph(
            {
                PACKAGE / "run" / "compose.py": "import omni_sfp.run.runner\n",
                PACKAGE / "run" / "runner.py": "import omni_sfp.run.compose\n",
            }
        )
    )
    assert circles(import_graph({PACKAGE / "run" / "compose.py": "import omni_sfp.run.runner\n"})) == []


def test_compose_reads_no_output_and_nothing_of_run_imports_the_runner():
    """The layers of run/ as the rule reads them: compose imports nothing of run; only train.py reaches the
    runner."""
    graph = import_graph({path: path.read_text() for path in sources()})
    assert {t for t in graph["omni_sfp.run.compose"] if t.startswith("omni_sfp.run")} == set()
    assert sorted(m for m, targets in graph.items() if "omni_sfp.run.runner" in targets and run_layer(m)) == []


def test_the_top_level_holds_few_entries_besides_the_subpackages():
    files = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert files == ["__init__.py", "list_tasks.py", "schema.py", "train.py"]
