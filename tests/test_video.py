"""Video: the embedded Cartpole's renderer draws its state, and RecordingEnv writes clips of any rgb_array task."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from omni_sfp.envs.registry import make_env
from omni_sfp.run.outputs import video
from omni_sfp.run.outputs.video import RecordingEnv, VideoError, as_frame, read_video, write_video
from omni_sfp.tasks.cartpole import Cartpole

POLE, CART = (230, 140, 30), (40, 70, 160)


def mask(frame: np.ndarray, colour: tuple[int, int, int], tolerance: int = 40) -> np.ndarray:
    """Pixels within ``tolerance`` of ``colour`` in every channel (lossy video shifts colours a little)."""
    return (np.abs(frame.astype(int) - np.array(colour)) <= tolerance).all(axis=-1)


def centroid(pixels: np.ndarray) -> tuple[float, float]:
    rows, cols = np.nonzero(pixels)
    return float(rows.mean()), float(cols.mean())


def test_cartpole_frames_draw_the_cart_where_it_is_and_the_pole_at_its_angle():
    task = Cartpole(3, "cpu", 0)
    task.state = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.5, 0.0, 0.6, 0.0], [-1.5, 0.0, -0.6, 0.0]])
    frames = [task.render(i) for i in range(3)]
    for frame in frames:
        assert frame.shape == (240, 480, 3) and frame.dtype == np.uint8
    (upright, right, left) = frames
    cart_row, cart_col = centroid(mask(upright, CART, 0))
    assert abs(cart_col - 239.5) <= 1.0  # x = 0 is the middle of the frame
    pole_rows, pole_cols = np.nonzero(mask(upright, POLE, 0))
    assert pole_rows.max() <= cart_row and pole_rows.max() - pole_rows.min() > 50  # above the cart, ~1 m tall
    assert pole_cols.max() - pole_cols.min() <= 6  # upright: a vertical bar
    # +x is to the right, and a positive angle leans the pole towards +x: 0.6 rad from the vertical
    scale = 480 / (2 * (task.reset_dist + 0.6))
    assert abs(centroid(mask(right, CART, 0))[1] - (239.5 + 1.5 * scale)) <= 1.5
    rows, cols = np.nonzero(mask(right, POLE, 0))
    slope = np.polyfit(rows, cols, 1)[0]  # columns per row along the pole; rows grow downwards
    assert math.isclose(math.atan(-slope), 0.6, abs_tol=0.05)
    assert centroid(mask(left, POLE, 0))[1] < centroid(mask(left, CART, 0))[1]  # leaning towards -x
    with pytest.raises(ValueError, match="env_index=3"):
        task.render(3)


def test_cartpole_renders_no_frame_unless_asked():
    """Rendering reads the state only when called: stepping never draws (no host sync added to a step)."""
    task = Cartpole(2, "cpu", 0)
    before = task.state.clone()
    frame = task.render(0)
    assert torch.equal(task.state, before) and mask(frame, POLE, 0).sum() > 50


@pytest.mark.parametrize("mp4", [True, False], ids=["mp4", "gif"])
def test_recording_env_writes_a_clip_every_interval_of_the_first_environment(tmp_path, monkeypatch, mp4):
    if mp4 and not video.mp4_available():
        pytest.skip("pip install omni-sfp[video]")
    monkeypatch.setattr(video, "mp4_available", lambda: mp4)
    env = RecordingEnv(
        make_env("Cartpole", num_envs=4, device="cpu", seed=0), tmp_path / "videos", video_length=6, video_interval=10
    )
    assert env.num_envs == 4 and env._env.__class__ is Cartpole  # the runner's view of the env is unchanged
    env.reset()
    push = torch.ones(4, 1)  # full force to +x: the pole falls back, the cart runs right
    for _ in range(23):
        env.step(push)
    env.close()  # writes the clip cut short at step 23
    suffix = ".mp4" if mp4 else ".gif"
    assert [p.name for p in env.written] == [f"step-{n}{suffix}" for n in (0, 10, 20)]
    assert sorted(p.name for p in (tmp_path / "videos").iterdir()) == [p.name for p in env.written]  # no temp files
    clips = [read_video(p) for p in env.written]
    assert [len(c) for c in clips] == [7, 7, 4]  # the first state and one frame per step
    for frames in clips:
        for frame in frames:
            assert mask(frame, POLE).sum() > 30 and mask(frame, CART).sum() > 200  # the pole and cart are there
        assert all(not np.array_equal(a, b) for a, b in zip(frames, frames[1:]))  # and move
    # in the first clip (no episode ends in it) the pushed cart runs right and the pole falls back, to the left
    first, last = clips[0][0], clips[0][-1]
    assert centroid(mask(last, CART))[1] > centroid(mask(first, CART))[1] + 10
    assert (
        centroid(mask(last, POLE))[1] - centroid(mask(last, CART))[1]
        < centroid(mask(first, POLE))[1] - centroid(mask(first, CART))[1]
    )


def test_gymnasium_ids_record_through_their_rgb_array_render(tmp_path):
    env = make_env("gym:Pendulum-v1", num_envs=2, device="cpu", seed=0, task_cfg={"render_mode": "rgb_array"})
    env = RecordingEnv(env, tmp_path, video_length=3, video_interval=None)
    env.reset()
    for _ in range(5):
        env.step(torch.zeros(2, 1))
    env.close()
    (clip,) = env.written
    frames = read_video(clip)
    assert len(frames) == 4 and frames[0].shape == (500, 500, 3)
    assert not np.array_equal(frames[0], frames[-1])  # the pendulum swings


def test_frames_are_normalised_and_a_task_without_frames_is_one_line():
    as_uint8 = as_frame((torch.full((1, 4, 6, 4), 0.5),))  # a tuple of a batched float RGBA tensor
    assert as_uint8.shape == (4, 6, 3) and as_uint8.dtype == np.uint8 and (as_uint8 == 127).all()
    with pytest.raises(VideoError, match="render_mode='rgb_array'"):
        as_frame(None)
    with pytest.raises(VideoError, match=r"shape \(5,\)"):
        as_frame(np.zeros(5))
    env = RecordingEnv(
        make_env("LQR60x8", num_envs=2, device="cpu", seed=0), "unused", video_length=2, video_interval=1
    )
    env.reset()
    with pytest.raises(VideoError, match="rendered no frame"):
        env.step(torch.zeros(2, 8))
    with pytest.raises(VideoError, match="video_length=0"):
        video.check_settings(0, 10)
    with pytest.raises(VideoError, match="video_interval=True"):
        video.check_settings(10, True)


def test_write_video_pads_odd_sizes(tmp_path):
    if not video.mp4_available():
        pytest.skip("pip install omni-sfp[video]")
    frames = [np.full((11, 13, 3), value, np.uint8) for value in (0, 128, 255)]
    path = write_video(tmp_path / "odd", frames, fps=10)
    back = read_video(path)
    assert len(back) == 3 and back[0].shape == (12, 14, 3)
    assert [int(np.median(f)) for f in back] == pytest.approx([0, 128, 255], abs=3)
