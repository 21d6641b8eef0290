"""``python -m omni_sfp.list_tasks [--kind KIND] [--json]``: every task ``task=`` accepts, with its observation and
action sizes and where its config comes from.

- embedded: this package's tasks; sizes from the task built with one environment on the CPU (its
  ``cfg/task/<Task>.yaml`` arguments), config from ``cfg/task/<Task>.yaml`` + ``cfg/train/<Task>PPO.yaml``.
- oige (OmniIsaacGymEnvs installed): sizes read from its task sources (``self._num_observations = N`` in the
  class its ``utils/task_util.py`` maps the name to; ``-`` where a task computes them), config from its own
  ``cfg/task/<Task>.yaml`` + ``cfg/train/<Task>PPO.yaml``. Nothing from OmniIsaacGymEnvs is imported.
- isaaclab (Isaac Lab installed): the ``Isaac-*`` Gymnasium ids ``isaaclab_tasks`` registers; sizes from the
  env config class where it states them (direct workflows' ``observation_space``/``action_space``), config
  from the ids' ``env_cfg_entry_point`` and ``skrl_cfg_entry_point``.
- gymnasium: any ``gym:<Id>`` works without being listed; ``--kind gymnasium`` lists the ids Gymnasium knows.

Exit codes: 0 listed; 2 misuse (an unknown option or kind), on one line.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

KINDS = ("embedded", "oige", "isaaclab", "gymnasium")
ISAACLAB_PREFIXES = ("Isaac-", "IsaacContrib-")


@dataclass(frozen=True)
class TaskRow:
    """One line of the listing (``None`` sizes: not known without starting the simulator)."""

    name: str
    kind: str
    observations: int | str | None  # a flat size, or a shape / space in words ("6x96x96", "Discrete(2)")
    actions: int | str | None
    config: str
    description: str = ""
    states: int | str | None = None  # a privileged critic's state, where the task has one
    presets: str | None = None  # an Isaac Lab task's presets= names, comma-separated (physics=/renderer= apart)


def embedded_rows() -> list[TaskRow]:
    from omegaconf import OmegaConf

    from omni_sfp.config.schema import config_dir
    from omni_sfp.envs import registry

    rows = []
    for name in registry.list_tasks("embedded"):
        spec = registry.get_task(name)
        task_class = spec.load()
        task_file = config_dir() / "task" / f"{name}.yaml"
        kwargs = dict(spec.kwargs)
        if task_file.is_file():
            env = OmegaConf.to_container(OmegaConf.load(task_file).get("env", {}), resolve=True)
            kwargs.update({k: v for k, v in env.items() if k != "num_envs"})
        task = task_class(1, "cpu", 0, **kwargs)
        rows.append(
            TaskRow(
                name,
                "embedded",
                task.observation_size,
                task.action_size,
                f"cfg/task/{name}.yaml + cfg/train/{name}PPO.yaml",
                spec.description,
            )
        )
        task.close()
    return rows


def oige_rows(package: Path | None = None) -> list[TaskRow]:
    from omni_sfp.envs import oige

    package = package or oige.package_dir()
    if package is None:
        return []
    classes = _oige_task_classes(package)
    taken = _registered(None) - _registered("oige")  # the names register_oige_tasks prefixes with OIGE-
    rows = []
    for task in oige.task_names(package):
        name = task if task not in taken else f"{oige.PREFIX}{task}"
        observations, actions = _oige_sizes(package, *classes.get(task, (None, None)))
        rows.append(
            TaskRow(
                name,
                "oige",
                observations,
                actions,
                f"{package}/cfg/task/{task}.yaml + cfg/train/{task}PPO.yaml",
                f"OmniIsaacGymEnvs {task} (Isaac Sim, PhysX)",
            )
        )
    return rows


def _registered(kind: str | None) -> set[str]:
    from omni_sfp.envs import registry

    return set(registry.list_tasks(kind))


def _oige_task_classes(package: Path) -> dict[str, tuple[str, str]]:
    """``task name -> (module, class)`` from ``utils/task_util.py``'s imports and its ``task_map`` dict."""
    source = package / "utils" / "task_util.py"
    if not source.is_file():
        return {}
    tree = ast.parse(source.read_text())
    modules = {
        alias.asname or alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    mapping = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if (
                    isinstance(key, ast.Constant)
                    and isinstance(key.value, str)
                    and isinstance(value, ast.Name)
                    and value.id in modules
                ):
                    mapping[key.value] = (modules[value.id], value.id)
    return mapping


def _oige_sizes(package: Path, module: str | None, class_name: str | None) -> tuple[int | None, int | None]:
    """The literal ``self._num_observations`` / ``self._num_actions`` a task class sets (None: not one literal)."""
    if module is None:
        return None, None
    path = package.parent / Path(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        return None, None
    found: dict[str, set] = {"_num_observations": set(), "_num_actions": set()}
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        for assign in ast.walk(node):
            if isinstance(assign, ast.Assign):
                for target in assign.targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and target.attr in found
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        value = assign.value
                        found[target.attr].add(value.value if isinstance(value, ast.Constant) else None)

    def single(values: set) -> int | None:
        return next(iter(values)) if len(values) == 1 and isinstance(next(iter(values)), int) else None

    return single(found["_num_observations"]), single(found["_num_actions"])


def isaaclab_rows() -> list[TaskRow]:
    """The ``Isaac-*`` ids, after importing ``isaaclab_tasks`` (it registers them; no Kit needed in Isaac Lab 3)."""
    if importlib.util.find_spec("isaaclab_tasks") is None:
        return []
    import gymnasium

    importlib.import_module("isaaclab_tasks")
    rows = []
    for task_id in sorted(gymnasium.registry):
        if not task_id.startswith(ISAACLAB_PREFIXES):
            continue
        kwargs = gymnasium.registry[task_id].kwargs or {}
        entry = kwargs.get("env_cfg_entry_point")
        sources = [_entry_name(entry)] if entry is not None else []
        if kwargs.get("skrl_cfg_entry_point") is not None:
            sources.append(_entry_name(kwargs["skrl_cfg_entry_point"]))
        cfg = _isaaclab_cfg(entry)
        observations, actions, states = _isaaclab_sizes(cfg)
        config = " + ".join(sources) or "-"
        presets = _isaaclab_presets(cfg)
        rows.append(
            TaskRow(task_id, "isaaclab", observations, actions, config, "Isaac Lab", states=states, presets=presets)
        )
    return rows


def _isaaclab_presets(cfg: Any) -> str | None:
    """The ``presets=`` names an env config declares (Isaac Lab's ``--help`` lists them), or None."""
    if cfg is None:
        return None
    try:
        from omni_sfp.envs.isaaclab import preset_names_of

        names = preset_names_of(cfg)["presets"]
    except ImportError:  # an isaaclab_tasks without Isaac Lab 3's preset machinery
        return None
    return ",".join(names) or None


def _entry_name(entry: Any) -> str:
    if isinstance(entry, str):
        return entry
    return f"{getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', type(entry).__name__)}"


def _isaaclab_cfg(entry: Any) -> Any:
    """The env config an entry point names, as an instance where its class needs one (``@configclass`` makes every
    default a factory); None where it cannot be loaded here."""
    from omni_sfp.envs import registry

    cfg_class = entry
    if isinstance(entry, str) and ":" in entry and not entry.endswith((".yaml", ".yml")):
        try:
            cfg_class = registry.load_entry_point(entry)
        except Exception:  # a task module that needs more than this machine has: list it without sizes
            return None
    if isinstance(cfg_class, type) and not hasattr(cfg_class, "observation_space"):
        try:  # Isaac Lab's @configclass turns defaults into default factories: only an instance has them
            return cfg_class()
        except Exception:
            return None
    return cfg_class


def _isaaclab_sizes(entry: Any) -> tuple[int | str | None, int | str | None, int | str | None]:
    """A direct workflow's env config states ``observation_space`` and ``action_space`` as ints; others: None."""
    cfg = _isaaclab_cfg(entry)
    if cfg is None:
        return None, None, None
    if not hasattr(cfg, "observation_space") and hasattr(cfg, "default"):  # a presets container: its default
        cfg = cfg.default
    observation_space = getattr(cfg, "observation_space", None)
    frames = getattr(cfg, "frame_stack", 1)
    if isinstance(observation_space, list) and isinstance(frames, int) and frames > 1:  # stacked at env init
        observation_space = [observation_space[0] * frames, *observation_space[1:]]
    observations, actions, states = (
        size_text(space)
        for space in (observation_space, getattr(cfg, "action_space", None), getattr(cfg, "state_space", None))
    )
    return observations, actions, states


def size_text(space: Any) -> int | str | None:
    """A size as Isaac Lab's configs state it: an int as is, a shape as ``6x96x96``, a Gymnasium space in words
    (``Discrete(2)``, ``MultiDiscrete([3 2])``); None when unknown or zero (no state)."""
    if isinstance(space, bool) or space is None:
        return None
    if isinstance(space, int):
        return space or None
    if isinstance(space, list | tuple) and space and all(isinstance(d, int) for d in space):
        return "x".join(map(str, space))
    if type(space).__module__.startswith("gymnasium"):
        shape = getattr(space, "shape", None)
        if type(space).__name__ == "Box" and shape:
            return "x".join(map(str, shape)) if len(shape) > 1 else int(shape[0])
        return str(space) if type(space).__name__ != "Box" else None
    if isinstance(space, set) and len(space) == 1:  # Isaac Lab's shorthand for Discrete: {n}
        return f"Discrete({next(iter(space))})"
    return None


def gymnasium_rows() -> list[TaskRow]:
    import gymnasium

    return [
        TaskRow(f"gym:{task_id}", "gymnasium", None, None, "Gymnasium's registry + cfg/train/GenericPPO.yaml")
        for task_id in sorted(gymnasium.registry)
        if not task_id.startswith(ISAACLAB_PREFIXES)
    ]


def rows(kind: str | None = None) -> list[TaskRow]:
    """The listing, all kinds but the long Gymnasium one unless ``kind`` picks one."""
    makers = {"embedded": embedded_rows, "oige": oige_rows, "isaaclab": isaaclab_rows, "gymnasium": gymnasium_rows}
    kinds = [kind] if kind else ["embedded", "oige", "isaaclab"]
    return [row for k in kinds for row in makers[k]()]


def format_table(listing: list[TaskRow]) -> str:
    def size(value: int | str | None) -> str:
        return "-" if value is None else str(value)

    def observations(row: TaskRow) -> str:
        return size(row.observations) + (f" + states {row.states}" if row.states is not None else "")

    header = ("task", "kind", "obs", "act", "config")
    lines = [
        (r.name, r.kind, observations(r), size(r.actions), r.config + (f"; presets={r.presets}" if r.presets else ""))
        for r in listing
    ]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(4)]

    def render(line: tuple[str, ...]) -> str:
        return (
            f"{line[0]:<{widths[0]}}  {line[1]:<{widths[1]}}  {line[2]:>{widths[2]}}  {line[3]:>{widths[3]}}  {line[4]}"
        )

    return "\n".join(render(line) for line in [header, *lines])


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, as omni_sfp.train does
        print(f"omni_sfp.envs.listing: error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m omni_sfp.list_tasks", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=KINDS, help="list one kind only (gymnasium: only when asked)")
    parser.add_argument("--json", action="store_true", help="one JSON object per task")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    listing = rows(args.kind)
    if args.json:
        text = "\n".join(json.dumps(asdict(row)) for row in listing)
    else:
        text = format_table(listing)
        if args.kind is None:
            text += (
                "\n\nAlso any Gymnasium id as gym:<Id> (e.g. task=gym:Pendulum-v1); list them with --kind "
                "gymnasium. Train one with: python -m omni_sfp.train task=<task>"
            )
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stderr.close()
        return 0
    from omni_sfp.envs.registry import source_errors

    for error in source_errors():  # the tasks a broken adapter would have listed, and why they are missing
        print(f"omni_sfp.envs.listing: not loaded: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
