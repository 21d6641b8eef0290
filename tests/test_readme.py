"""The README stays true: its example model runs in skrl PPO with the cache hitting, and its config table
lists every key the configuration defines."""

import re
import runpy
from pathlib import Path

import torch
from omegaconf import OmegaConf
from ppo_driver import BOX_ACT, BOX_OBS, make_agent, run

from omni_sfp.run.compose import config_dir, load_config

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_example_model_is_served_by_the_cache(tmp_path):
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", README, re.DOTALL) if "class MyActorCritic" in b]
    example = tmp_path / "readme_example.py"
    example.write_text(block)
    model_class = runpy.run_path(str(example))["MyActorCritic"]
    torch.manual_seed(0)
    model = model_class(BOX_OBS, BOX_ACT, "cpu")
    run(make_agent({"policy": model, "value": model}), steps=8)
    assert model.trunk.stats.hits >= 8


def _leaf_keys(node, prefix=""):
    for key, value in node.items():
        if OmegaConf.is_dict(value):
            yield from _leaf_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_every_config_key_is_in_the_readme_table():
    cfg = load_config([])
    documented = set(re.findall(r"^\| `([^`]+)` \|", README, re.MULTILINE))
    keys = {k for k in _leaf_keys(cfg) if not k.startswith("task.") and k != "task_name"}
    assert keys - documented == set()
    assert "task" in documented and (config_dir() / "task").is_dir()


ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FILE = re.compile(r"(?<![\w/.-])((?:omni_sfp|tests|cfg|tasks|config|docs|\.ci)/[\w/.-]*\w)")
DOTTED = re.compile(r"(?<![\w./-])(omni_sfp(?:\.\w+)+)")
# names that are no path of the checkout: where a wheel installs tasks/ and cfg/, and the entry-point group
NOT_IN_THE_CHECKOUT = {"omni_sfp/cfg", "omni_sfp/tasks", "omni_sfp.task_sources"}


def _resolves(dotted: str) -> bool:
    """``omni_sfp.a.b.Name.attr``: the longest module prefix imports and the rest are attributes of it. A module
    that needs what only Kit has (``omni``, ``carb``) is read instead: its file, and the first name at its top level."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        source = _source_file(parts[:cut])
        if source is None:
            continue
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as error:
            if error.name and error.name.split(".")[0] != "omni_sfp":
                return not parts[cut:] or parts[cut] in _top_level_names(source)
            raise
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def _source_file(parts: list[str]) -> Path | None:
    """The module's file in the checkout, or where an import would find it (``omni_sfp.tasks`` is the root's
    ``tasks/``, see ``omni_sfp/__init__.py``)."""
    import importlib.util

    folder = ROOT.joinpath(*parts)
    for candidate in (folder / "__init__.py", folder.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    try:
        spec = importlib.util.find_spec(".".join(parts))
    except ModuleNotFoundError:
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def _top_level_names(source: Path) -> set[str]:
    import ast

    tree = ast.parse(source.read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
    return names | {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def test_every_path_and_module_the_docs_name_exists():
    """Each ``omni_sfp/...``, ``tests/...``, ``cfg/...`` path and each ``omni_sfp.x.y`` module or attribute named
    in README.md and docs/*.md resolves (so a move that leaves a document behind fails here)."""
    missing = []
    for document in DOCUMENTS:
        text = document.read_text()
        for path in sorted(set(FILE.findall(text))):
            if path.endswith("_") or path in NOT_IN_THE_CHECKOUT:  # a pattern (tests/test_<module>.py)
                continue
            if not any(c in path for c in "*<>") and not (ROOT / path.rstrip(".")).exists():
                missing.append(f"{document.name}: {path}")
        for dotted in sorted(set(DOTTED.findall(text))):
            if dotted not in NOT_IN_THE_CHECKOUT and not _resolves(dotted.rstrip(".")):
                missing.append(f"{document.name}: {dotted}")
    assert missing == []


def test_the_docs_commands_name_runnable_modules():
    commands = {m for d in DOCUMENTS for m in re.findall(r"python(?:\.sh)? -m (omni_sfp[\w.]*)", d.read_text())}
    assert {"omni_sfp.train", "omni_sfp.bench", "omni_sfp.list_tasks", "omni_sfp.schema"} <= commands
    import importlib.util

    assert [m for m in sorted(commands) if importlib.util.find_spec(m) is None] == []
