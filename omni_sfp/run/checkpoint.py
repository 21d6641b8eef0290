"""Checkpoints that are never half-written, that resume a run exactly, and that are refused clearly.

A checkpoint holds everything the rest of a run depends on: the agent's modules (models, optimizer,
preprocessors), the GradScaler and learning-rate scheduler, the timestep and iteration, every RNG state,
the task's own state when it has one (the embedded tasks do), the current observations and the best return
so far. It is written to a temporary file in the same folder and renamed over the target, so a crash leaves
either the old file or the new one.

Only tensors and plain containers are stored (the NumPy RNG state is converted), so :func:`load` reads with
``torch.load(weights_only=True)``: opening a checkpoint from elsewhere cannot run code.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from omni_sfp.config.values import checkpoint_file

FORMAT = "omni_sfp.run.checkpoint/2"  # 2: the agent saves itself under "agent" (SFPPPO.state_dict)
REQUIRED_KEYS = ("agent", "iteration", "timestep", "local", "config")


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

    :raises CheckpointError: missing, empty, truncated, unreadable or foreign file; one line that names the
        file and what is wrong with it.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"checkpoint {path}: the file is empty (0 bytes)")
    with open(path, "rb") as file:
        head = file.read(4)
    if head == b"PK\x03\x04" and not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"checkpoint {path}: truncated ({size} bytes, the end of its zip archive is missing); "
            "it was not written completely: use another checkpoint of the run"
        )
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if "Weights only load failed" in str(error):
            raise CheckpointError(
                f"checkpoint {path}: not an omni-sfp checkpoint (it stores Python objects, not only tensors "
                "and containers)"
            ) from None
        raise CheckpointError(f"checkpoint {path}: unreadable ({_one_line(error)})") from None
    except Exception as error:  # torch raises many types for a damaged file; all mean the same here
        raise CheckpointError(f"checkpoint {path}: unreadable or corrupt ({_one_line(error)})") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"checkpoint {path}: not an omni-sfp checkpoint (it holds a {type(payload).__name__})")
    if payload.get("format") != FORMAT:
        if "format" in payload:
            found = f"format {payload['format']!r}, this version reads {FORMAT!r}"
        else:
            keys = ", ".join(map(str, list(payload)[:6])) + (", ..." if len(payload) > 6 else "")
            found = f"a dict with keys {keys} and no 'format' entry"
            if {"policy", "optimizer"} <= set(payload):
                found += "; it looks like a skrl agent checkpoint: resume from the run's checkpoints/last.pt"
        raise CheckpointError(f"checkpoint {path}: not an omni-sfp checkpoint ({found})")
    missing = [key for key in REQUIRED_KEYS if key not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {path}: incomplete, missing {', '.join(missing)}")
    return payload


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:160] or type(error).__name__


def resolve(path: str | os.PathLike, which: str = "last") -> Path:
    """A checkpoint file, or a run folder's ``checkpoints/<which>.pt``, as
    :func:`omni_sfp.config.values.checkpoint_file` reads ``checkpoint=`` (the panel reads it so too)."""
    try:
        return checkpoint_file(path, which)
    except FileNotFoundError as error:
        raise CheckpointError(str(error)) from None


def run_folder_of(checkpoint: Path) -> Path | None:
    """The run folder a checkpoint file belongs to (``<run>/checkpoints/<name>.pt``), or None."""
    run = checkpoint.resolve().parent.parent
    if checkpoint.resolve().parent.name == "checkpoints" and (run / "config.yaml").is_file():
        return run
    return None


def rng_state() -> dict[str, Any]:
    """torch (CPU and CUDA), NumPy and Python RNG states, as tensors and plain containers only."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(cached_gaussian)),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"].cpu())  # loading with map_location="cuda" moves it; set_rng_state wants CPU
    name, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), position, has_gauss, cached_gaussian))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def rotate(folder: Path, keep: int) -> None:
    """Keep the ``keep`` newest ``iter_*.pt`` files in ``folder`` (``best.pt`` and ``last.pt`` stay)."""
    numbered = sorted(folder.glob("iter_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    for old in numbered[:-keep] if keep > 0 else numbered:
        old.unlink(missing_ok=True)
