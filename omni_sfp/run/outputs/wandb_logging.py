"""Weights & Biases logging, with OmniIsaacGymEnvs' switches: ``wandb_activate=true wandb_project=...
wandb_entity=... wandb_group=... wandb_name=...`` (``pip install omni-sfp[wandb]``).

The run mirrors what goes to TensorBoard, scalar for scalar and at the same step (:class:`MirroredWriter` tees
the agent's writer), and holds the resolved config. Its files go to ``<run folder>/wandb/``, so the run folder
stays self-contained; ``WANDB_MODE=offline`` works without a network (``wandb sync <run folder>/wandb/offline-run-*``
uploads later). A resumed run (``resume=true``) continues the same W&B run: its id is kept in
``<run folder>/wandb_run_id``. OIGE passes ``sync_tensorboard=True``; that patches TensorBoard's own writer
classes, which skrl 2's writer does not use, hence the explicit tee. Only the main process logs.
"""

from __future__ import annotations

import importlib.util
import secrets
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_sfp.run.outputs.base import OutputError, RunOutput

RUN_ID_FILE = "wandb_run_id"


class WandbError(OutputError):
    """wandb missing, a bad setting, or a run that could not start: one line naming the cause."""


@dataclass(frozen=True)
class WandbSettings:
    """OmniIsaacGymEnvs' ``wandb_*`` keys (cfg/config.yaml documents each)."""

    activate: bool = False
    project: str = "omni_sfp"
    entity: str | None = None  # None: the logged-in user's default entity
    group: str | None = None
    name: str | None = None  # None: the run folder's name

    @classmethod
    def from_config(cls, cfg: Any) -> WandbSettings:
        """Read and check the keys from a config mapping (absent keys keep their defaults).

        :raises WandbError: a key of the wrong type, an empty project, or activation without wandb installed.
        """
        values = {}
        for field, kind in (("activate", bool), ("project", str), ("entity", str), ("group", str), ("name", str)):
            key = f"wandb_{field}"
            if key not in cfg:
                continue
            value = cfg[key]
            if value in (None, "") and field not in ("activate", "project"):  # OIGE's '' means unset
                values[field] = None
                continue
            if not isinstance(value, kind) or (kind is str and isinstance(value, bool)):
                raise WandbError(f"{key}={value!r}: expected {'true or false' if kind is bool else 'a string'}")
            values[field] = value
        settings = cls(**values)
        if settings.activate:
            if not settings.project.strip():
                raise WandbError("wandb_project='': name a project (wandb_project=<name>)")
            if importlib.util.find_spec("wandb") is None:
                raise WandbError("wandb_activate=true needs the wandb package: pip install 'omni-sfp[wandb]'")
        return settings


def start_run(settings: WandbSettings, config: dict[str, Any], run_dir: str | Path) -> Any:
    """``wandb.init`` for this run folder: project, entity, group and name from ``settings``, ``config`` as the
    run's config, files under ``run_dir/wandb``; the same W&B run again when the folder already has one.

    :raises WandbError: wandb could not start the run (e.g. online without network or credentials).
    """
    import wandb

    run_dir = Path(run_dir)
    id_file = run_dir / RUN_ID_FILE
    run_id = id_file.read_text().strip() if id_file.is_file() else _new_id()
    try:
        run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            group=settings.group,
            name=settings.name or run_dir.name,
            config=config,
            dir=str(run_dir),
            id=run_id,
            resume="allow",
        )
    except Exception as error:  # wandb raises its own errors, and network ones, from its service process
        message = " ".join(str(error).split())[:300]
        raise WandbError(
            f"wandb_activate=true: W&B could not start the run ({type(error).__name__}: {message}); "
            "WANDB_MODE=offline logs without a network"
        ) from None
    id_file.write_text(run_id + "\n")
    return run


def _new_id() -> str:
    """Eight lowercase letters and digits, the form of W&B's own run ids."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


class MirroredWriter:
    """A TensorBoard writer that also logs every scalar to a W&B run at the same step; everything else
    (``flush``, ``close``, private fields the runner reads) forwards to the wrapped writer.

    Accepts skrl's ``add_scalar(tag=, value=, timestep=)`` and torch's ``add_scalar(tag, scalar_value,
    global_step)``.
    """

    def __init__(self, writer: Any, run: Any) -> None:
        self.__dict__["_writer"] = writer
        self.__dict__["_run"] = run

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_writer"], name)

    def add_scalar(self, *args: Any, **kwargs: Any) -> Any:
        result = self._writer.add_scalar(*args, **kwargs)
        names = (
            ("tag", "value", "timestep")
            if "timestep" in kwargs or "value" in kwargs
            else ("tag", "scalar_value", "global_step")
        )
        bound = dict(zip(names, args), **kwargs)
        tag = bound["tag"]
        value = bound.get("value", bound.get("scalar_value"))
        step = bound.get("timestep", bound.get("global_step"))
        self._run.log({tag: float(value)}, step=None if step is None else int(step))
        return result

    def close(self) -> None:
        self._writer.close()


def mirror(agent: Any, run: Any) -> None:
    """Tee ``agent.writer`` (skrl's TensorBoard writer, made in ``agent.init``) to ``run``; no-op without one."""
    writer = getattr(agent, "writer", None)
    if writer is not None and not isinstance(writer, MirroredWriter):
        agent.writer = MirroredWriter(writer, run)


class Wandb(RunOutput):
    """``wandb_activate=true``: a W&B run from the start of training, mirroring TensorBoard, finished at the end."""

    def __init__(self, settings: WandbSettings) -> None:
        self.settings = settings
        self.run: Any = None

    def start(self, run) -> None:
        from omegaconf import OmegaConf

        self.run = start_run(self.settings, OmegaConf.to_container(run.cfg, resolve=True), run.run_dir)
        mirror(run.agent, self.run)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def check_config(cfg: Any) -> None:
    WandbSettings.from_config(cfg)


def output_for(cfg: Any, *, main: bool) -> Wandb | None:
    settings = WandbSettings.from_config(cfg)
    return Wandb(settings) if settings.activate and main and not cfg.test else None
