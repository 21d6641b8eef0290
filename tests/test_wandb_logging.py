"""Weights & Biases logging, checked the only way that runs without a network: WANDB_MODE=offline, then the
offline run's record file is read back (config, and every TensorBoard scalar at its step)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from omni_sfp.run.outputs.wandb_logging import RUN_ID_FILE, MirroredWriter, WandbError, WandbSettings, mirror, start_run

wandb = pytest.importorskip("wandb", reason="pip install omni-sfp[wandb]")


def wandb_records(path: Path):
    """The records of a ``run-<id>.wandb`` file: W&B's 7-byte header (``:W&B``, magic, version), then LevelDB's
    log format (32 KiB blocks of chunks: CRC32, length, type FULL/FIRST/MIDDLE/LAST), each record a protobuf
    ``Record`` (wandb/proto/wandb_internal.proto). wandb 0.31 reads it in Go only, so it is parsed here."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, block, pieces = 7, 32768, []
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:  # zero padding up to the block's end
            position += left
            continue
        pieces.append(data[position + 7 : position + 7 + length])
        position += 7 + length
        if kind in (1, 4):  # FULL or LAST: a record is complete
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(pieces))
            pieces = []
            yield record


def read_offline_run(run_dir: Path) -> tuple[dict, dict, list[dict]]:
    """(run fields, config, history rows) of the newest offline run under ``run_dir/wandb``.

    wandb's service process writes the file after ``finish()`` returns: wait (up to a minute, on a loaded
    machine) until the file holds the run's closing ``exit`` record, then read it."""
    import time

    (record_file,) = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))[-1:]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if any(r.WhichOneof("record_type") == "exit" for r in wandb_records(record_file)):
                break
        except Exception:  # a chunk still being written
            pass
        time.sleep(0.2)
    run, config, history = {}, {}, []
    for record in wandb_records(record_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = {
                "project": record.run.project,
                "entity": record.run.entity,
                "group": record.run.run_group,
                "name": record.run.display_name,
                "id": record.run.run_id,
            }
            config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            history.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return run, config, history


def test_an_offline_run_holds_the_config_and_mirrors_every_scalar(tmp_path, monkeypatch):
    from skrl.utils.tensorboard import SummaryWriter

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = WandbSettings.from_config(
        {
            "wandb_activate": True,
            "wandb_project": "sfp-tests",
            "wandb_entity": "lab",
            "wandb_group": "cartpole",
            "wandb_name": None,
        }
    )
    config = {"task": {"name": "Cartpole"}, "train": {"ppo": {"learning_rate": 0.0003}}, "seed": 42}
    run = start_run(settings, config, tmp_path)

    class Agent:
        writer = SummaryWriter(log_dir=str(tmp_path))

    agent = Agent()
    mirror(agent, run)
    mirror(agent, run)  # idempotent: one tee, not two
    assert isinstance(agent.writer, MirroredWriter) and not isinstance(agent.writer._writer, MirroredWriter)
    for step in (16, 32, 48):  # what skrl's agent writes once an iteration
        agent.writer.add_scalar(tag="Reward / Episode return (mean)", value=step / 2, timestep=step)
        agent.writer.add_scalar(tag="Loss / Policy loss", value=-step / 100, timestep=step)
    agent.writer.flush()  # forwarded to skrl's writer
    run.finish()

    fields, logged_config, history = read_offline_run(tmp_path)
    assert fields == {
        "project": "sfp-tests",
        "entity": "lab",
        "group": "cartpole",
        "name": tmp_path.name,
        "id": (tmp_path / RUN_ID_FILE).read_text().strip(),
    }
    assert {k: logged_config[k] for k in config} == config
    rows = [{k: v for k, v in row.items() if not k.startswith("_")} | {"step": row["_step"]} for row in history]
    assert rows == [
        {"Reward / Episode return (mean)": s / 2, "Loss / Policy loss": -s / 100, "step": s} for s in (16, 32, 48)
    ]
    assert any(p.name.startswith("events.out.tfevents") for p in tmp_path.iterdir())  # TensorBoard still written

    run_id = (tmp_path / RUN_ID_FILE).read_text().strip()
    again = start_run(settings, config, tmp_path)  # resume=true in the same run folder: the same W&B run
    assert again.id == run_id
    again.finish()


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"wandb_activate": "yes"}, "wandb_activate='yes': expected true or false"),
        ({"wandb_activate": True, "wandb_project": ""}, "wandb_project=''"),
        ({"wandb_group": 3}, "wandb_group=3: expected a string"),
    ],
)
def test_bad_settings_are_one_line(cfg, message):
    with pytest.raises(WandbError, match=message.replace("(", r"\(")):
        WandbSettings.from_config(cfg)


def test_activation_without_wandb_installed_is_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(WandbError, match=r"pip install 'omni-sfp\[wandb\]'"):
        WandbSettings.from_config({"wandb_activate": True})
    assert not WandbSettings.from_config({"wandb_activate": False}).activate  # off: wandb is never needed
