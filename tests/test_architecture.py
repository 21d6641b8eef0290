"""The architecture's one rule, read from the sources: each part of omni_sfp imports only the parts below it
(docs/architecture.md, "The parts"). Every import counts, module-level or inside a function, so a lazy import
cannot hide an upward dependency; and the modules' import-time graph has no circle."""

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


def imports_of(source: str, path: Path, module: str, *, module_level_only: bool = False) -> list[tuple[int, str]]:
    """``(line, imported omni_sfp module)`` for each import in ``source`` (``from omni_sfp import x`` names the
    submodule x where x is one)."""
    tree = ast.parse(source)
    nodes = tree.body if module_level_only else ast.walk(tree)
    found = []
    for node in nodes:
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
    return found


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


def test_the_import_time_graph_has_no_circle():
    graph = {}
    for path in sources():
        module = module_name(path)
        graph[module] = {t for _, t in imports_of(path.read_text(), path, module, module_level_only=True)} - {module}
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, trail: list[str]) -> list[str] | None:
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if seen.get(nxt) == 1:
                return [*trail[trail.index(nxt) :], nxt] if nxt in trail else [*trail, nxt]
            if nxt not in seen and (circle := visit(nxt, [*trail, nxt])):
                return circle
        seen[node] = 2
        return None

    for start in sorted(graph):
        if start not in seen and (circle := visit(start, [start])):
            pytest.fail("import circle: " + " -> ".join(circle))


def test_the_top_level_holds_few_entries_besides_the_subpackages():
    files = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert files == ["__init__.py", "list_tasks.py", "schema.py", "train.py"]
