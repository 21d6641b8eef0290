"""Video of training and evaluation episodes, Isaac Lab's ``--video --video_length --video_interval``.

:class:`RecordingEnv` wraps the skrl env the runner steps and records environment 0 of any task whose env
renders ``rgb_array`` frames: the embedded Cartpole (its own numpy renderer), Gymnasium ids (made with
``render_mode="rgb_array"``) and Isaac Lab tasks created with that render mode and cameras enabled. A clip of
``video_length`` steps starts every ``video_interval`` vectorised steps, counted from the first step (Isaac
Lab's ``step_trigger=lambda step: step % video_interval == 0``), and is written to ``<folder>/step-<n>.mp4``
(``pip install omni-sfp[video]``: imageio with its bundled ffmpeg) or, without imageio-ffmpeg, to an animated
``step-<n>.gif`` (Pillow, which matplotlib already brings). Between clips the wrapper adds one counter
increment per step and reads nothing from the device; a run without ``video=true`` has no wrapper at all.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from omni_sfp.run.outputs.base import OutputError, RunOutput

DEFAULT_FPS = 30


class VideoError(OutputError):
    """A task that renders no usable frame, or bad video settings: one line naming the cause."""


def check_settings(video_length: Any, video_interval: Any) -> None:
    """Refuse lengths and intervals that are not positive integers (bool is not an integer here).

    :raises VideoError: naming the key and the value.
    """
    for key, value in (("video_length", video_length), ("video_interval", video_interval)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise VideoError(f"{key}={value!r}: expected an integer >= 1 (steps)")


def check_config(cfg: Any) -> None:
    """``video``, ``video_length``, ``video_interval`` of a run config, and whether its task can be recorded.

    :raises VideoError: a bad value, or ``video=true`` for a task that draws no frames.
    """
    if not isinstance(cfg.video, bool):
        raise VideoError(f"video={cfg.video!r}: expected true or false")
    check_settings(cfg.video_length, cfg.video_interval)
    if not cfg.video:
        return
    from omni_sfp.envs.registry import get_task

    spec = get_task(cfg.task.name)
    if spec.kind == "oige":
        raise VideoError(
            f"video=true: task {cfg.task.name} (OmniIsaacGymEnvs) renders no rgb_array frames; record it "
            "with Isaac Sim's Movie Capture"
        )
    if spec.kind == "embedded":
        if not callable(getattr(spec.load(), "render", None)):
            raise VideoError(
                f"video=true: task {cfg.task.name} draws nothing (the embedded task with a renderer is "
                "Cartpole; Gymnasium ids and Isaac Lab tasks render too)"
            )


def render_options(task_name: str) -> dict[str, Any]:
    """What a task's env needs at creation to render ``rgb_array`` frames (merged into its ``task.env``)."""
    from omni_sfp.envs.registry import get_task

    kind = get_task(task_name).kind
    if kind == "gymnasium":
        return {"render_mode": "rgb_array"}
    if kind == "isaaclab":  # Isaac Lab's train.py --video: render_mode for gym.make, and cameras for the app
        return {"render_mode": "rgb_array", "enable_cameras": True}
    return {}


def mp4_available() -> bool:
    """True when imageio and imageio-ffmpeg (its bundled ffmpeg binary) are installed."""
    import importlib.util

    return importlib.util.find_spec("imageio") is not None and importlib.util.find_spec("imageio_ffmpeg") is not None


def as_frame(rendered: Any) -> np.ndarray:
    """One ``(H, W, 3)`` uint8 frame from what an env's ``render()`` returns: an array or tensor, float in
    [0, 1] or uint8, RGB or RGBA, alone or batched (a vectorised env's tuple of frames, a camera batch): the
    first environment's.

    :raises VideoError: Nothing was rendered (``render_mode`` is not ``rgb_array``) or not an image.
    """
    if isinstance(rendered, (tuple, list)):
        rendered = rendered[0] if rendered else None
    if rendered is None:
        raise VideoError(
            "the task rendered no frame: it needs render_mode='rgb_array' (Isaac Lab tasks also need "
            "cameras enabled); embedded tasks other than Cartpole have no renderer"
        )
    if hasattr(rendered, "detach"):  # a torch tensor, e.g. an Isaac Lab camera
        rendered = rendered.detach().cpu().numpy()
    frame = np.asarray(rendered)
    if frame.ndim == 4:
        frame = frame[0]
    if frame.ndim == 2:
        frame = np.repeat(frame[:, :, None], 3, axis=2)
    if frame.ndim != 3 or frame.shape[2] not in (3, 4):
        raise VideoError(f"the task rendered an array of shape {frame.shape}, not an (H, W, 3) image")
    frame = frame[:, :, :3]
    if frame.dtype != np.uint8:
        frame = np.clip(frame.astype(np.float32) * (255.0 if frame.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(frame)


def write_video(path: str | Path, frames: Sequence[np.ndarray], fps: float) -> Path:
    """Write ``frames`` to ``path`` with the suffix set to ``.mp4`` (imageio-ffmpeg installed) or ``.gif``;
    atomically (temporary file, then rename). Returns the path written."""
    if not frames:
        raise VideoError("no frames to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mp4 = mp4_available()
    path = path.with_suffix(".mp4" if mp4 else ".gif")
    handle, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(handle)
    try:
        if mp4:
            import imageio.v2 as imageio

            # H.264 with yuv420p needs even sides: pad by a row/column instead of letting imageio rescale
            height, width = frames[0].shape[:2]
            pad = ((0, height % 2), (0, width % 2), (0, 0))
            with imageio.get_writer(
                tmp, format="FFMPEG", fps=fps, codec="libx264", pixelformat="yuv420p", macro_block_size=1
            ) as writer:
                for frame in frames:
                    writer.append_data(np.pad(frame, pad, mode="edge") if any(p[1] for p in pad) else frame)
        else:
            from PIL import Image

            images = [Image.fromarray(frame) for frame in frames]
            images[0].save(
                tmp, format="GIF", save_all=True, append_images=images[1:], loop=0, duration=max(20, round(1000 / fps))
            )
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def read_video(path: str | Path) -> list[np.ndarray]:
    """The frames of a file :func:`write_video` wrote, as ``(H, W, 3)`` uint8 arrays (for tests and checks)."""
    path = Path(path)
    if path.suffix == ".mp4":
        import imageio.v2 as imageio

        with imageio.get_reader(str(path), format="FFMPEG") as reader:
            return [np.asarray(frame)[:, :, :3] for frame in reader]
    from PIL import Image, ImageSequence

    with Image.open(path) as image:
        return [np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(image)]


class RecordingEnv:
    """A skrl env wrapper that records clips of environment 0 while it is stepped; everything else forwards.

    ``env._env`` (what skrl's wrapper wraps: the embedded task, the Gymnasium vector env, the Isaac Lab env)
    is asked for ``render()`` after a clip starts and after every step of it. Attribute reads it does not
    define go to ``env``, so the runner and skrl's trainer see the wrapped env's ``num_envs``, spaces and
    ``_env`` unchanged.

    :param env: The skrl wrapper to record.
    :param folder: Where the clips go (created on the first clip).
    :param video_length: Steps per clip (a clip has ``video_length + 1`` frames: the first state and one per step).
    :param video_interval: A clip starts at every multiple of this many steps; ``None``: one clip, at step 0.
    :param fps: Frames per second of the file; default: the task's ``metadata["render_fps"]``, else 30.
    """

    def __init__(
        self, env: Any, folder: str | Path, *, video_length: int, video_interval: int | None, fps: float | None = None
    ) -> None:
        check_settings(video_length, video_interval if video_interval is not None else 1)
        self.__dict__["_wrapped"] = env  # set before anything else: __getattr__ reads it
        self._source = getattr(env, "_env", env)
        self.folder = Path(folder)
        self.video_length = int(video_length)
        self.video_interval = video_interval
        metadata = getattr(self._source, "metadata", None) or {}
        self.fps = float(fps or metadata.get("render_fps") or DEFAULT_FPS)
        self.step_count = 0  # vectorised steps so far
        self.written: list[Path] = []
        self._frames: list[np.ndarray] = []
        self._clip_start: int | None = None  # the step at which the open clip started

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_wrapped"], name)

    def reset(self):
        result = self._wrapped.reset()
        if self._clip_start is not None:
            self._frames.append(self._render())
        return result

    def step(self, actions):
        if self._clip_start is None and self._triggered(self.step_count):
            self._clip_start = self.step_count
            self._frames = [self._render()]  # the state the clip's first step starts from
        result = self._wrapped.step(actions)
        self.step_count += 1
        if self._clip_start is not None:
            self._frames.append(self._render())
            if self.step_count - self._clip_start >= self.video_length:
                self._write()
        return result

    def _render(self) -> np.ndarray:
        render = getattr(self._source, "render", None)
        return as_frame(render() if callable(render) else None)

    def _triggered(self, step: int) -> bool:
        if self.video_interval is None:
            return step == 0
        return step % self.video_interval == 0

    def _write(self) -> None:
        self.written.append(write_video(self.folder / f"step-{self._clip_start}", self._frames, self.fps))
        self._frames, self._clip_start = [], None

    def flush(self) -> Path | None:
        """Write a clip cut short (the run ended inside it); returns its path, or None when none was open."""
        if self._clip_start is None or len(self._frames) < 2:
            self._frames, self._clip_start = [], None
            return None
        self._write()
        return self.written[-1]

    def close(self) -> None:
        self.flush()
        self._wrapped.close()


class Video(RunOutput):
    """``video=true``: the task's env made to render, wrapped in a :class:`RecordingEnv` writing to the run
    folder's ``videos/train`` (``videos/play`` with ``test=true``, one clip from the evaluation's start); at the
    end, the clip the run ended in."""

    order = 30

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.env: RecordingEnv | None = None
        self.written: list[Path] = []

    def env_options(self) -> dict[str, Any]:
        return render_options(self.cfg.task.name)

    def wrap_env(self, env: Any, folder: Path) -> RecordingEnv:
        test = bool(self.cfg.test)
        self.env = RecordingEnv(
            env,
            folder / "videos" / ("play" if test else "train"),
            video_length=self.cfg.video_length,
            video_interval=None if test else self.cfg.video_interval,
        )
        return self.env

    def start(self, run) -> None:
        self.env.step_count = run.iteration * run.cfg.train.ppo.rollouts  # step-<n> counts the whole run

    def end(self, run, summary) -> None:
        self.env.flush()
        self.written = list(self.env.written)

    def lines(self) -> list[str]:
        if not self.written:
            return []
        more = f" (+{len(self.written) - 1} more in that folder)" if len(self.written) > 1 else ""
        return [f"[omni_sfp] video: {self.written[-1]}{more}"]


def output_for(cfg: Any, *, main: bool) -> Video | None:
    return Video(cfg) if cfg.video and main else None
