"""Isaac Lab tasks (Gymnasium ids ``Isaac-...`` and ``IsaacContrib-...``) for omni_sfp: lookup, launch, close.

Tested against Isaac Lab 3.0.0 (PyPI ``isaaclab``, Python 3.12, kit-less with Newton physics on the CPU: the
``tests/isaaclab`` tier). Isaac Lab 2.x (``AppLauncher``, ids registered only once Isaac Sim runs) takes the
same code path where its API allows; it is not run here.

Importing this module is light (no torch, no Isaac Lab). The registry reaches it through the
``omni_sfp.task_sources`` entry point (:func:`register_source`), which adds :func:`resolve` for the ids:

- Isaac Lab 3: ``import isaaclab_tasks`` needs no Kit, so an id is checked against Gymnasium's registry before
  anything launches (an unknown one gets a ``did you mean``), and a multi-agent id (``DirectMARLEnvCfg``) is
  refused with one line: omni_sfp trains one agent.
- Isaac Lab 2.x: the ids appear only after Isaac Sim starts, so they are checked in :func:`make_isaaclab_env`.

:func:`make_isaaclab_env` then does what Isaac Lab's ``isaaclab_rl`` skrl train entry point does: parse the
registered env config (string device, ``num_envs``, seed, overrides), launch (``launch_simulation``: nothing
for Newton, Kit for a Kit backend; ``AppLauncher`` on 2.x; cameras enabled when the scene has one), build the
env and wrap it with skrl's Isaac Lab wrapper. The returned env closes the env and then the app exactly once:
on ``close()``, at interpreter exit (normal end, an uncaught error, Ctrl-C) and on SIGTERM.
"""

from __future__ import annotations

import atexit
import difflib
import importlib.metadata
import importlib.util
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from omni_sfp.config.schema import parse_device

if TYPE_CHECKING:
    from omni_sfp.envs.registry import TaskSpec

PREFIXES = ("Isaac-", "IsaacContrib-")
ENTRY_POINT = "omni_sfp.envs.isaaclab:make_isaaclab_env"
LAUNCH_KEYS = ("physics", "renderer", "visualizer", "experience", "livestream", "enable_cameras")  # launcher args
INSTALL_HINT = "Isaac Lab 3 needs Python 3.12: pip install isaaclab==3.0.0 skrl==2.1.1"


class IsaacLabError(RuntimeError):
    """Isaac Lab is missing, cannot launch, or refuses the task; the message says what to do in one line."""


def is_isaaclab_id(name: str) -> bool:
    return name.startswith(PREFIXES)


def version() -> tuple[int, ...] | None:
    """The installed ``isaaclab`` distribution's version (3.0.0 -> (3, 0, 0)); None when it is not installed."""
    try:
        spec = importlib.util.find_spec("isaaclab")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin in (None, "namespace"):  # a folder named isaaclab is not Isaac Lab
        return None
    try:
        text = importlib.metadata.version("isaaclab")
    except importlib.metadata.PackageNotFoundError:  # a source checkout on the path (Isaac Lab 2.x style)
        return (0,)
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def kitless() -> bool:
    """Whether ``isaaclab_tasks`` can be imported before any launch (Isaac Lab 3)."""
    installed = version()
    return installed is not None and installed[0] >= 3


def registered_ids() -> list[str]:
    """The Isaac Lab ids in Gymnasium's registry now (``isaaclab_tasks`` adds them when imported)."""
    import gymnasium

    return sorted(task_id for task_id in gymnasium.registry if is_isaaclab_id(task_id))


def load_ids() -> list[str]:
    """Import ``isaaclab_tasks`` (kit-less on Isaac Lab 3) and return its registered ids."""
    import isaaclab_tasks  # noqa: F401  (registers the ids)

    return registered_ids()


def check_id(name: str) -> None:
    """Refuse, before anything launches, an id Isaac Lab does not register or a multi-agent one.

    :raises UnknownTaskError: unknown id (with the closest registered ids).
    :raises IsaacLabError: a multi-agent task.
    """
    from omni_sfp.envs.registry import UnknownTaskError

    ids = load_ids()
    if name not in ids:
        close = difflib.get_close_matches(name, ids, n=3, cutoff=0.75)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        note = " (Isaac Lab 3 ids have no -v0 suffix)" if name.endswith("-v0") else ""
        raise UnknownTaskError(
            f"Isaac Lab {version_text()} has no task {name!r}{hint}{note}; {len(ids)} ids are "
            'registered (python -c "import isaaclab_tasks, gymnasium; print([i for i in '
            "gymnasium.registry if i.startswith('Isaac')])\")"
        )
    if is_multi_agent(name):
        raise IsaacLabError(
            f"task {name!r} is multi-agent (DirectMARLEnvCfg) and omni_sfp trains one agent; train "
            "it with Isaac Lab's own skrl entry point (IPPO / MAPPO)"
        )


def is_multi_agent(name: str) -> bool:
    from isaaclab.envs import DirectMARLEnvCfg
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    return isinstance(parse_env_cfg(name), DirectMARLEnvCfg)  # resolved as Isaac Lab does: presets included


SELECTORS = ("presets", "physics", "renderer")  # Isaac Lab 3's tokens (isaaclab_tasks/utils/preset_cli.py)


def preset_names_of(cfg: Any) -> dict[str, list[str]]:
    """The preset names a config tree (an env config, or a skrl config family) declares, by selector:
    ``{"presets": [...], "physics": [...], "renderer": [...]}``; a name is bucketed by the type of config it
    selects, as Isaac Lab's ``--help`` does (``default`` is the fallback, not a name)."""
    from isaaclab_tasks.utils.hydra import collect_presets
    from isaaclab_tasks.utils.preset_target import PresetTarget

    typed = [target for target in PresetTarget if target.base_classes]
    names: dict[str, set[str]] = {selector: set() for selector in SELECTORS}
    for fields in collect_presets(cfg).values():
        for name, value in fields.items():
            if name != "default":
                target = next((t for t in typed if t.matches(value)), PresetTarget.DOMAIN)
                names[target.value].add(name)
    return {selector: sorted(found) for selector, found in names.items()}


def preset_names(name: str, agent_entry: str | None = None) -> dict[str, list[str]]:
    """The preset names of task ``name``: its env config's and, with ``agent_entry``, its agent config family's."""
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    names = preset_names_of(load_cfg_from_registry(name, "env_cfg_entry_point"))
    if agent_entry is not None and gymnasium_kwargs(name).get(agent_entry) is not None:
        agent = preset_names_of(load_cfg_from_registry(name, agent_entry))
        names = {key: sorted({*names[key], *agent[key]}) for key in SELECTORS}
    return names


def gymnasium_kwargs(name: str) -> dict[str, Any]:
    import gymnasium

    return dict(gymnasium.spec(name).kwargs or {})


def check_presets(name: str, overrides: list[str], agent_entry: str | None = None) -> None:
    """Refuse, in one line listing the task's names, a ``presets=``/``physics=``/``renderer=`` name task ``name``
    does not declare (Isaac Lab's own error is a multi-line table).

    :raises IsaacLabError: an unknown name.
    """
    names = preset_names(name, agent_entry)
    everything = {n for found in names.values() for n in found}
    for override in overrides:
        selector, _, value = override.partition("=")
        allowed = everything if selector == "presets" else set(names.get(selector, ()))  # presets= broadcasts
        unknown = [n for n in value.split(",") if n.strip() and n.strip() not in allowed]
        if unknown:
            listed = "; ".join(f"{key}: {', '.join(found) or '(none)'}" for key, found in names.items())
            what = "preset" if selector == "presets" else f"{selector} preset"
            raise IsaacLabError(
                f"{override}: task {name!r} has no {what} {', '.join(map(repr, unknown))}; its presets: {listed}"
            )


def resolve_configs(name: str, overrides: list[str], agent_entry: str | None = None) -> tuple[Any, Any]:
    """``(env_cfg, agent_cfg)`` of task ``name`` with Isaac Lab's selector tokens applied by Isaac Lab itself
    (``resolve_task_config``, what ``parse_env_cfg(overrides=...)`` calls): a presets container or a skrl config
    family (``preset(default=..., **configs)``) resolves to the selected member, or to its default.

    :raises IsaacLabError: an unknown name, or a selection Isaac Lab refuses (one line).
    """
    from isaaclab_tasks.utils.hydra import resolve_task_config

    overrides = list(overrides)
    if overrides:
        check_presets(name, overrides, agent_entry)
    if agent_entry is not None and gymnasium_kwargs(name).get(agent_entry) is None:
        agent_entry = None
    try:
        return resolve_task_config(name, agent_entry, overrides=overrides)
    except ValueError as error:
        raise IsaacLabError(f"{' '.join(overrides)}: {' '.join(str(error).split())}") from None


def version_text() -> str:
    installed = version()
    return "(not installed)" if installed is None else ".".join(map(str, installed))


def resolve(name: str) -> TaskSpec | None:
    """The registry's resolver: a spec for an Isaac Lab id, None for other names.

    :raises UnknownTaskError: Isaac Lab is not installed, or (Isaac Lab 3) has no such id.
    :raises IsaacLabError: a multi-agent id (Isaac Lab 3).
    """
    from omni_sfp.envs.registry import TaskSpec, UnknownTaskError

    if not is_isaaclab_id(name):
        return None
    if version() is None:
        raise UnknownTaskError(f"task {name!r} is an Isaac Lab id and Isaac Lab is not installed here ({INSTALL_HINT})")
    if not kitless():
        return TaskSpec(name, "isaaclab", ENTRY_POINT, f"Isaac Lab {name} (checked once Isaac Sim starts)")
    check_id(name)
    return TaskSpec(name, "isaaclab", ENTRY_POINT, f"Isaac Lab {name}")


def register_source() -> None:
    """The ``omni_sfp.task_sources`` entry point: resolve Isaac Lab ids on demand (no import of Isaac Lab here)."""
    from omni_sfp.envs import registry

    registry.register_resolver(resolve)


def register_isaaclab_tasks(ids: list[str] | None = None) -> list[str]:
    """List Isaac Lab ids in omni_sfp's registry (for the panel's dropdown); returns the names registered.

    Without ``ids``: the ids in Gymnasium's registry now (Isaac Lab 3 imports ``isaaclab_tasks`` for them;
    on 2.x they are there once Isaac Sim runs with Isaac Lab's extensions).
    """
    from omni_sfp.envs import registry

    if ids is None:
        names = load_ids() if kitless() else registered_ids()
    else:
        names = list(ids)
    for task_id in names:
        if not is_isaaclab_id(task_id):
            raise ValueError(f"task {task_id!r}: Isaac Lab ids start with {' or '.join(map(repr, PREFIXES))}")
        registry.register_task(registry.TaskSpec(task_id, "isaaclab", ENTRY_POINT, f"Isaac Lab {task_id}"))
    return names


def device_string(device: Any) -> str:
    """Isaac Lab's device: a ``str`` (``SimulationContext`` does ``"cuda" in device``), ``cuda:N`` for CUDA."""
    kind, index = parse_device(str(device))  # torch.device("cuda", 0) -> "cuda:0"
    if kind == "auto":
        import torch

        kind = "cuda" if torch.cuda.is_available() else "cpu"
    return "cpu" if kind == "cpu" else f"cuda:{index or 0}"


def apply_overrides(env_cfg: Any, name: str, task_cfg: Mapping[str, Any]) -> None:
    """Set env config attributes from ``task_cfg`` (dotted keys reach nested configs: ``scene.env_spacing``).

    :raises IsaacLabError: a key the env config does not have.
    """
    for key, value in task_cfg.items():
        target = env_cfg
        *parents, leaf = key.split(".")
        for parent in parents:
            if not hasattr(target, parent):
                raise IsaacLabError(f"task.env.{key}: the env config of {name!r} has no field {parent!r}")
            target = getattr(target, parent)
        if not hasattr(target, leaf):
            raise IsaacLabError(f"task.env.{key}: the env config of {name!r} has no such field")
        setattr(target, leaf, value)


def has_camera(cfg: Any) -> bool:
    """Whether a config tree holds a camera sensor (``CameraCfg`` or a subclass such as ``TiledCameraCfg``)."""
    from isaaclab.sensors.camera.camera_cfg import CameraCfg

    seen: set[int] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, CameraCfg):
            return True
        if id(node) in seen or not hasattr(node, "__dict__") or isinstance(node, type):
            return False
        seen.add(id(node))
        return any(visit(child) for child in vars(node).values())

    return visit(cfg)


def launcher_args(env_cfg: Any, *, headless: bool, device: str, launch: Mapping[str, Any]) -> dict[str, Any]:
    """Isaac Lab's launcher arguments (as its scripts' ``args_cli``) for this env config."""
    args = {"headless": headless, "device": device, **launch}
    if has_camera(env_cfg):
        args["enable_cameras"] = True  # Isaac Lab's scripts need --enable_cameras for camera tasks
    return args


class _Session:
    """Closes the env, then the app, once: from ``close()``, ``atexit`` or SIGTERM, whichever comes first."""

    def __init__(self) -> None:
        self.env: Any = None
        self.closers: list[Any] = []  # called last-in first-out after the env
        self.closed = False
        atexit.register(self.close)
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # omni_sfp's runner installs its own while training
            signal.signal(signal.SIGTERM, _exit_on_sigterm)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        try:
            if self.env is not None:
                self.env.close()
        finally:
            for closer in reversed(self.closers):
                closer()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through atexit, which closes the env and the app


def _launch(session: _Session, env_cfg: Any, args: dict[str, Any]) -> None:
    from isaaclab.app import launch_simulation

    context = launch_simulation(env_cfg, args)
    _enter(context.__enter__)
    session.closers.append(lambda: context.__exit__(None, None, None))


def _enter(start: Any) -> Any:
    """Start an Isaac Lab launcher; its ``SystemExit`` (Isaac Sim missing) becomes one :class:`IsaacLabError` line."""
    try:
        return start()
    except SystemExit as error:  # AppLauncher / Kit's launcher log the reason, then sys.exit(1)
        raise IsaacLabError(
            f"Isaac Lab could not start Isaac Sim (it exited with {error.code}); this env config "
            "needs Kit (a Kit physics backend, renderer or camera): install Isaac Sim 5+ "
            "(pip install isaaclab[isaacsim]), or use a kit-less backend "
            "(physics=newton_mjwarp, the default)"
        ) from None
    except (ImportError, ModuleNotFoundError) as error:
        raise IsaacLabError(
            f"Isaac Lab could not start Isaac Sim: {error}; install Isaac Sim (pip install "
            "isaaclab[isaacsim]) or use a kit-less backend (physics=newton_mjwarp, the "
            "default)"
        ) from None


def make_isaaclab_env(
    name: str,
    *,
    num_envs: int,
    device: Any,
    seed: int,
    headless: bool = True,
    task_cfg: Mapping[str, Any] | None = None,
) -> Any:
    """Launch what Isaac Lab env ``name`` needs, build it from its registered config and wrap it for skrl 2.

    :param device: ``cpu``, ``cuda``, ``cuda:N``, ``auto`` or a ``torch.device`` (Isaac Lab gets a ``str``).
    :param task_cfg: env config overrides (``{"episode_length_s": 10.0}``; dotted keys reach nested configs:
        ``{"scene.env_spacing": 3.0}``), plus the launcher's own keys :data:`LAUNCH_KEYS`
        (``{"physics": "isaacsim_physx"}``, Isaac Lab's launcher selector), ``render_mode`` for
        ``gymnasium.make`` (``video=true`` passes ``"rgb_array"`` and ``enable_cameras``), and ``overrides``:
        Isaac Lab's selector tokens (``["presets=dict_box", "physics=newton_mjwarp"]``), applied as
        ``parse_env_cfg(overrides=...)`` applies them.
    :raises IsaacLabError: Isaac Lab missing, launch impossible, a multi-agent task or a bad override.
    :raises UnknownTaskError: Isaac Lab has no such id (checked before anything launches).
    """
    installed = version()
    if installed is None:
        raise IsaacLabError(f"task {name!r} needs Isaac Lab ({INSTALL_HINT})")
    device = device_string(device)
    task_cfg = dict(task_cfg or {})
    overrides = list(task_cfg.pop("overrides", None) or ())  # presets=, physics=, renderer= (Isaac Lab's tokens)
    launch = {key: task_cfg.pop(key) for key in LAUNCH_KEYS if key in task_cfg}
    render_mode = task_cfg.pop("render_mode", None)  # video=true: "rgb_array" (with enable_cameras), as play.py --video
    session = _Session()
    try:
        if installed[0] >= 3:
            check_id(name)
            env_cfg = _env_cfg(name, device, num_envs, seed, task_cfg, overrides)
            _launch(session, env_cfg, launcher_args(env_cfg, headless=headless, device=device, launch=launch))
        else:  # Isaac Lab 2.x: Isaac Sim first, then the tasks (they import omni.*)
            from isaaclab.app import AppLauncher

            enable_cameras = bool(launch.get("enable_cameras", False))
            app = _enter(lambda: AppLauncher(headless=headless, device=device, enable_cameras=enable_cameras))
            session.closers.append(app.app.close)
            check_id(name)
            env_cfg = _env_cfg(name, device, num_envs, seed, task_cfg, overrides)
        import gymnasium

        session.env = gymnasium.make(name, cfg=env_cfg, render_mode=render_mode)
        return _wrap(session)
    except BaseException:
        session.close()
        raise


def _env_cfg(name: str, device: str, num_envs: int, seed: int, task_cfg: dict, overrides: list[str]) -> Any:
    # parse_env_cfg(name, device, num_envs, overrides): the tokens resolved with the agent family, as Isaac Lab's
    # train.py resolves them (a name only the skrl family declares is no unknown name); launch_simulation applies a
    # launcher's `physics`
    env_cfg, _ = resolve_configs(name, overrides, "skrl_cfg_entry_point")
    env_cfg.sim.device = device
    env_cfg.scene.num_envs = num_envs
    env_cfg.seed = seed
    apply_overrides(env_cfg, name, task_cfg)
    return env_cfg


def _wrap(session: _Session) -> Any:
    from skrl.envs.wrappers.torch.isaaclab_envs import IsaacLabWrapper

    class IsaacLabEnv(IsaacLabWrapper):
        """skrl's Isaac Lab wrapper whose ``close()`` also ends the launch (idempotent)."""

        def close(self) -> None:
            session.close()

    return IsaacLabEnv(session.env)
