"""Checkpoints that are never half-written and that resume a run exactly.

A checkpoint holds everything the rest of a run depends on: the agent's modules (models, optimizer,
preprocessors, GradScaler), the timestep and iteration, every RNG state, the task's own state when it has
one (the embedded tasks do), the current observations and the best return so far. It is written to a
temporary file in the same folder and renamed over the target, so a crash leaves either the old file or
the new one.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT = "omni_sfp.checkpoint/1"


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, or not one of ours; the message names the file."""


def save_atomic(payload: dict[str, Any], path: str | os.PathLike) -> Path:
    """``torch.save`` to a temporary file beside ``path``, fsync, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save({"format": FORMAT, **payload}, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load one of our checkpoints.

    :raises CheckpointError: missing, unreadable, truncated or foreign file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as error:  # torch raises many types for a damaged file; all mean the same here
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise CheckpointError(f"checkpoint {path}: unreadable or truncated ({reason})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path}: not an omni-sfp checkpoint (expected format {FORMAT!r})")
    return payload


def resolve(path: str | os.PathLike) -> Path:
    """A checkpoint file, or a run folder (its newest checkpoint: ``checkpoints/last.pt``)."""
    path = Path(path)
    if path.is_dir():
        last = path / "checkpoints" / "last.pt"
        if not last.is_file():
            raise CheckpointError(f"checkpoint {path}: run folder has no checkpoints/last.pt")
        return last
    if not path.exists():
        raise CheckpointError(f"checkpoint {path}: no such file or run folder")
    return path


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rotate(folder: Path, keep: int) -> None:
    """Keep the ``keep`` newest ``iter_*.pt`` files in ``folder`` (``best.pt`` and ``last.pt`` stay)."""
    numbered = sorted(folder.glob("iter_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    for old in numbered[:-keep] if keep > 0 else numbered:
        old.unlink(missing_ok=True)
