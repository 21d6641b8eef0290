"""The one registry of trainable tasks: embedded, OmniIsaacGymEnvs, Isaac Lab and Gymnasium ids.

A task is a :class:`TaskSpec` whose entry point is a ``"module:attr"`` string, imported (with importlib)
only when :func:`make_env` builds it, so listing tasks, e.g. for the panel's dropdown, imports neither torch
nor a simulator. The embedded tasks are registered below; ``"gym:<Id>"`` resolves any Gymnasium id without
registration.

This module imports no adapter. Simulator adapters plug in through the ``omni_sfp.task_sources`` entry
point group (pyproject.toml): each entry point names a function that calls :func:`register_task` and/or
:func:`register_resolver`. They are loaded once, lazily, on the first lookup or listing, so the adapter
modules may import this one at module level without a cycle.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from skrl.envs.wrappers.torch import Wrapper

KINDS = ("embedded", "oige", "isaaclab", "gymnasium")
GYM_PREFIX = "gym:"
SOURCES_GROUP = "omni_sfp.task_sources"  # entry points: functions that register simulator tasks / resolvers
_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class TaskSpec:
    """How to build one task.

    ``entry_point`` depends on ``kind``: for ``"embedded"`` a :class:`~omni_sfp.tasks.base.VecTask` subclass,
    called as ``cls(num_envs, device, seed, **task_cfg)``; for ``"oige"`` and ``"isaaclab"`` a factory with
    :func:`make_env`'s signature, returning a skrl wrapper; for ``"gymnasium"`` ``gymnasium:make_vec``.
    """

    name: str  # what `task=` in the config and the panel's dropdown use
    kind: str  # one of KINDS: which adapter builds it
    entry_point: str  # "module:attr", imported when the task is built
    description: str  # one line shown next to the name
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # default task_cfg; make_env's task_cfg overrides it

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"task {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not _ENTRY_POINT.match(self.entry_point):
            raise ValueError(f"task {self.name!r}: entry_point must be 'module:attr', got {self.entry_point!r}")
        if (self.kind == "gymnasium") != self.name.startswith(GYM_PREFIX):
            raise ValueError(f"task {self.name!r}: a name starts with {GYM_PREFIX!r} exactly when kind is 'gymnasium'")

    def load(self) -> Any:
        """The object the entry point names (imports its module): :func:`load_entry_point`."""
        return load_entry_point(self.entry_point)


class UnknownTaskError(ValueError):
    """No registered task (or Gymnasium id) has this name."""


class MissingDependencyError(ValueError):
    """A task needs a package that is not installed; one line naming the package and how to install it.

    A ValueError, not a ``config.ConfigError``: this module stays importable without OmegaConf (the panel lists
    tasks through it); ``train`` reports it as bad input (exit 2) all the same.
    """


# packages a task's env imports that an extra or a pip command provides, by top-level module name
INSTALL_HINTS = {
    "Box2D": 'pip install swig && pip install "gymnasium[box2d]"',
    "mujoco": 'pip install -e ".[mujoco]"',
    "trimesh": "pip install trimesh (Isaac Lab's terrain generator needs it)",
    "imageio": 'pip install -e ".[video]"',
}


_TASKS: dict[str, TaskSpec] = {}
# name -> TaskSpec or None (not mine); may raise UnknownTaskError to say why a name it owns is not a task
Resolver = Callable[[str], "TaskSpec | None"]
_RESOLVERS: list[Resolver] = []
_SOURCES = {"loaded": False, "errors": []}  # the entry points of SOURCES_GROUP, loaded once


def register_resolver(resolver: Resolver) -> Resolver:
    """Add a resolver for names no spec holds (Isaac Lab's ids, looked up in Gymnasium's registry on demand).

    Registering the same function twice is a no-op.
    """
    if resolver not in _RESOLVERS:
        _RESOLVERS.append(resolver)
    return resolver


def source_errors() -> list[str]:
    """One line per task source (entry point) that failed to load: what the dropdown is missing, and why."""
    _load_sources()
    return list(_SOURCES["errors"])


def _load_sources() -> None:
    if _SOURCES["loaded"]:
        return
    _SOURCES["loaded"] = True
    for entry_point in importlib.metadata.entry_points(group=SOURCES_GROUP):
        try:
            entry_point.load()()
        except (ImportError, AttributeError, ValueError, OSError) as error:
            _SOURCES["errors"].append(f"task source {entry_point.name!r} ({entry_point.value}): {error}")


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add a task; registering the identical spec again is a no-op, a different one under a taken name an error.

    :raises ValueError: ``spec.name`` is registered with another spec.
    """
    registered = _TASKS.get(spec.name)
    if registered is not None and registered != spec:
        raise ValueError(f"task {spec.name!r} is already registered with entry point {registered.entry_point!r}")
    _TASKS[spec.name] = spec
    return spec


def list_tasks(kind: str | None = None) -> list[str]:
    """Sorted names of the registered tasks, all or of one kind (``"gym:<Id>"`` names are not listed)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    _load_sources()
    return sorted(name for name, spec in _TASKS.items() if kind is None or spec.kind == kind)


def get_task(name: str) -> TaskSpec:
    """The spec of a registered task, or of ``"gym:<Id>"`` for any id in Gymnasium's registry.

    :raises UnknownTaskError: No such task; the message lists close matches and the known tasks.
    """
    _load_sources()
    if name in _TASKS:
        return _TASKS[name]
    if name.startswith(GYM_PREFIX):
        return _gymnasium_spec(name)
    for resolver in _RESOLVERS:
        spec = resolver(name)
        if spec is not None:
            return spec
    close = difflib.get_close_matches(name, list(_TASKS), n=3)
    hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
    missing = "".join(f"; not loaded: {error}" for error in _SOURCES["errors"])  # a broken adapter says why
    raise UnknownTaskError(
        f"unknown task {name!r}; {hint}known tasks: {', '.join(list_tasks())} (or {GYM_PREFIX}<Gymnasium id>)" + missing
    )


def make_env(
    name: str,
    *,
    num_envs: int,
    device: str | torch.device,
    seed: int,
    headless: bool = True,
    task_cfg: Mapping[str, Any] | None = None,
) -> Wrapper:
    """Build task ``name`` with ``num_envs`` environments on ``device`` and wrap it for skrl 2.

    :param task_cfg: Task keyword arguments over the spec's defaults (an embedded task's constructor keywords,
        a Gymnasium env's ``make`` keywords, the simulator task config for OmniIsaacGymEnvs / Isaac Lab).
    :param headless: Only simulator tasks draw; embedded and Gymnasium tasks ignore it.
    :raises UnknownTaskError: No such task.
    :raises ValueError: ``num_envs`` is below 1 or ``task_cfg`` has keys the embedded task does not take.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be at least 1, got {num_envs}")
    spec = get_task(name)
    cfg = {**spec.kwargs, **(task_cfg or {})}
    try:
        factory = spec.load()
        if spec.kind == "embedded":
            return _make_embedded_env(spec, factory, num_envs, device, seed, cfg)
        if spec.kind == "gymnasium":
            return _make_gymnasium_env(spec, factory, num_envs, device, seed, cfg)
        return factory(name, num_envs=num_envs, device=device, seed=seed, headless=headless, task_cfg=cfg)
    except ModuleNotFoundError as error:  # an optional package the task's env imports
        package = (error.name or "").partition(".")[0]
        if not package:
            raise
        how = INSTALL_HINTS.get(package, f"pip install {package}")
        raise MissingDependencyError(
            f"task {name!r} needs the Python package {package!r}, which is not installed: {how}"
        ) from None
    except Exception as error:
        if type(error).__name__ != "DependencyNotInstalled":  # gymnasium.error's, raised by an env's constructor
            raise
        raise MissingDependencyError(f"task {name!r}: {' '.join(str(error).split())}") from None


def load_entry_point(entry_point: str) -> Any:
    """The object a ``"module:attr"`` string names (``attr`` may be dotted, ``module:Class.method``), its module
    imported: the one reader of entry points (tasks, Isaac Lab's registered config classes)."""
    module_name, _, attr = entry_point.partition(":")
    target = importlib.import_module(module_name)
    for name in attr.split("."):
        target = getattr(target, name)
    return target


def _make_embedded_env(
    spec: TaskSpec, task_class: type, num_envs: int, device: str | torch.device, seed: int, cfg: dict[str, Any]
) -> Wrapper:
    from omni_sfp.envs.embedded import EmbeddedEnvWrapper

    accepted = [p.name for p in inspect.signature(task_class).parameters.values() if p.kind == p.KEYWORD_ONLY]
    unknown = sorted(set(cfg) - set(accepted))
    if unknown:
        raise ValueError(f"task {spec.name!r} does not take {', '.join(unknown)}; it takes {', '.join(accepted)}")
    return EmbeddedEnvWrapper(task_class(num_envs, device, seed, **cfg))


def _gymnasium_spec(name: str) -> TaskSpec:
    import gymnasium

    gym_id = name[len(GYM_PREFIX) :]
    module, _, env_id = gym_id.rpartition(":")
    if module:  # gym:<module>:<Id>: the module registers the id when imported, as gymnasium.make resolves it
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UnknownTaskError(f"task {name!r}: cannot import module {module!r} ({error})") from None
        if env_id not in gymnasium.registry:
            close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise UnknownTaskError(f"task {name!r}: module {module!r} registers no Gymnasium id {env_id!r}{hint}")
        return TaskSpec(name, "gymnasium", "gymnasium:make_vec", f"Gymnasium {env_id} from {module}")
    if gym_id not in gymnasium.registry:
        close = difflib.get_close_matches(gym_id, list(gymnasium.registry), n=3)
        hint = f"; did you mean {' or '.join(repr(GYM_PREFIX + c) for c in close)}?" if close else ""
        raise UnknownTaskError(f"unknown Gymnasium id {gym_id!r} in task {name!r}{hint}")
    return TaskSpec(name, "gymnasium", "gymnasium:make_vec", f"Gymnasium {gym_id}, vectorised in this process")


def _make_gymnasium_env(
    spec: TaskSpec, make_vec: Any, num_envs: int, device: str | torch.device, seed: int, cfg: dict[str, Any]
) -> Wrapper:
    import torch
    from gymnasium.vector import AutoresetMode
    from skrl.envs.wrappers.torch import wrap_env

    # same-step autoreset: a finished env returns its next episode's first observation, as the embedded tasks do
    vector_env = make_vec(
        spec.name[len(GYM_PREFIX) :].rpartition(":")[2],  # gym:<module>:<Id>: the module is imported already
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        **cfg,
    )
    vector_env.device = torch.device(device)  # skrl's wrapper takes its device from the env's `device`
    env = wrap_env(vector_env, wrapper="gymnasium", verbose=False)
    env._seed = seed  # skrl seeds the first reset from the global skrl.config.torch.key; pin this env's seed
    return env


register_task(
    TaskSpec(
        "Cartpole",
        "embedded",
        "omni_sfp.tasks.cartpole:Cartpole",
        "Cart-pole balancing, OmniIsaacGymEnvs' reward; 4 obs, 1 action, max return 500",
    )
)
register_task(
    TaskSpec(
        "CartpolePositions",
        "embedded",
        "omni_sfp.tasks.cartpole:CartpolePositions",
        "Cartpole without velocities (2 obs: cart position, pole angle): a recurrent policy's task; max return 500",
    )
)
register_task(
    TaskSpec(
        "LQR60x8",
        "embedded",
        "omni_sfp.tasks.lqr:LQR60x8",
        "Ant-sized linear-quadratic regulator (60 obs, 8 actions) with a known optimal return",
    )
)
register_task(
    TaskSpec(
        "ConstantCost",
        "embedded",
        "omni_sfp.tasks.constant_cost:ConstantCost",
        "Benchmark task with fixed work per step (60 obs, 8 actions by default)",
    )
)
