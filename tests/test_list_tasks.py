"""``python -m omni_sfp.list_tasks``: every kind of task with its sizes and config source; misuse is one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from omni_sfp.envs import listing as list_tasks
from omni_sfp.envs.listing import TaskRow

ROOT = Path(__file__).resolve().parent.parent


def test_embedded_tasks_are_listed_with_the_sizes_their_configs_build(capsys):
    assert list_tasks.main(["--kind", "embedded", "--json"]) == 0
    listed = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(listed) == {"Cartpole", "CartpolePositions", "LQR60x8", "ConstantCost"}
    assert (listed["Cartpole"]["observations"], listed["Cartpole"]["actions"]) == (4, 1)
    assert (listed["CartpolePositions"]["observations"], listed["CartpolePositions"]["actions"]) == (2, 1)
    assert (listed["LQR60x8"]["observations"], listed["LQR60x8"]["actions"]) == (60, 8)
    assert listed["LQR60x8"]["config"] == "cfg/task/LQR60x8.yaml + cfg/train/LQR60x8PPO.yaml"


def test_the_default_listing_is_a_table_and_points_at_gym_ids(capsys):
    assert list_tasks.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["task", "kind", "obs", "act", "config"]
    assert out[1].split()[:4] == ["Cartpole", "embedded", "4", "1"]
    assert any("gym:<Id>" in line for line in out)


def test_gymnasium_ids_only_when_asked(capsys):
    assert list_tasks.main(["--kind", "gymnasium", "--json"]) == 0
    names = [json.loads(line)["name"] for line in capsys.readouterr().out.splitlines()]
    assert "gym:Pendulum-v1" in names and all(n.startswith("gym:") for n in names)
    assert not any(row.kind == "gymnasium" for row in list_tasks.rows())


@pytest.mark.slow  # a subprocess each
@pytest.mark.parametrize(
    "args, message",
    [(["--kind", "Cartpol"], "invalid choice: 'Cartpol'"), (["--bogus"], "unrecognized arguments: --bogus")],
)
def test_misuse_is_one_line_and_exit_2(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "omni_sfp.list_tasks", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("omni_sfp.envs.listing: error: ")
    assert message in result.stderr


# OmniIsaacGymEnvs 4.0.0's own layout, reduced to what the listing reads: utils/task_util.py imports each task
# class and maps names to them; a task class sets self._num_observations / self._num_actions in __init__
# (omniisaacgymenvs/tasks/cartpole.py: literals; tasks/shadow_hand.py: chosen by the config's observation type).
TASK_UTIL = """
def import_tasks():
    from omniisaacgymenvs.tasks.cartpole import CartpoleTask
    from omniisaacgymenvs.tasks.shadow_hand import ShadowHandTask
    task_map = {"Cartpole": CartpoleTask, "ShadowHand": ShadowHandTask, "ShadowHandOpenAI_FF": ShadowHandTask}
    return task_map
"""
CARTPOLE = """
class CartpoleTask(RLTask):
    def __init__(self, name, sim_config, env, offset=None) -> None:
        self.update_config(sim_config)
        self._max_episode_length = 500
        self._num_observations = 4
        self._num_actions = 1
        RLTask.__init__(self, name, env)
"""
SHADOW_HAND = """
class ShadowHandTask(InHandManipulationTask):
    def __init__(self, name, sim_config, env, offset=None) -> None:
        self.obs_type = self._task_cfg["env"]["observationType"]
        if self.obs_type == "openai":
            self._num_observations = 42
        else:
            self._num_observations = 157
        self._num_actions = 20
"""


def test_oige_tasks_are_read_from_its_files(tmp_path):
    package = tmp_path / "omniisaacgymenvs"
    for folder in ("cfg/task", "cfg/train", "utils", "tasks"):
        (package / folder).mkdir(parents=True)
    for task in ("Cartpole", "ShadowHand", "ShadowHandOpenAI_FF"):
        (package / "cfg" / "task" / f"{task}.yaml").write_text(f"name: {task}\n")
        (package / "cfg" / "train" / f"{task}PPO.yaml").write_text("params: {}\n")
    (package / "utils" / "task_util.py").write_text(TASK_UTIL)
    (package / "tasks" / "cartpole.py").write_text(CARTPOLE)
    (package / "tasks" / "shadow_hand.py").write_text(SHADOW_HAND)

    rows = {row.name: row for row in list_tasks.oige_rows(package)}
    assert set(rows) == {"OIGE-Cartpole", "ShadowHand", "ShadowHandOpenAI_FF"}  # the embedded task holds Cartpole
    assert (rows["OIGE-Cartpole"].observations, rows["OIGE-Cartpole"].actions) == (4, 1)
    assert (rows["ShadowHand"].observations, rows["ShadowHand"].actions) == (None, 20)  # set by the config
    assert rows["ShadowHand"].config == f"{package}/cfg/task/ShadowHand.yaml + cfg/train/ShadowHandPPO.yaml"
    assert list_tasks.format_table([rows["ShadowHand"]]).splitlines()[1].split()[:4] == [
        "ShadowHand",
        "oige",
        "-",
        "20",
    ]


# Isaac Lab 3's registration (isaaclab_tasks/core/cartpole/__init__.py): importing the package registers ids
# with gym.register(id=..., entry_point=..., kwargs={"env_cfg_entry_point": ..., "skrl_cfg_entry_point": ...});
# a direct workflow's env config class states observation_space and action_space as ints, which Isaac Lab's
# @configclass (isaaclab/utils/configclass.py) turns into dataclass fields with default factories.
ISAACLAB_TASKS = """
import dataclasses
import gymnasium as gym

@dataclasses.dataclass
class CartpoleEnvCfg:
    observation_space: int = dataclasses.field(default_factory=lambda: 4)
    action_space: int = dataclasses.field(default_factory=lambda: 1)

class AntEnvCfg:  # a manager-based config: sizes come from its observation terms
    observations = object()

gym.register(id="Isaac-FakeCartpole-Direct", entry_point="isaaclab.envs:DirectRLEnv", disable_env_checker=True,
             kwargs={"env_cfg_entry_point": f"{__name__}:CartpoleEnvCfg",
                     "skrl_cfg_entry_point": "isaaclab_tasks.core.cartpole.agents:skrl_direct_ppo_cfg.yaml"})
gym.register(id="Isaac-FakeAnt", entry_point="isaaclab.envs:ManagerBasedRLEnv", disable_env_checker=True,
             kwargs={"env_cfg_entry_point": AntEnvCfg})
"""


def test_isaaclab_ids_are_listed_when_isaaclab_tasks_is_installed(tmp_path, monkeypatch):
    import gymnasium

    (tmp_path / "isaaclab_tasks").mkdir()
    (tmp_path / "isaaclab_tasks" / "__init__.py").write_text(textwrap.dedent(ISAACLAB_TASKS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "isaaclab_tasks", raising=False)
    try:
        rows = {row.name: row for row in list_tasks.isaaclab_rows()}
    finally:
        for task_id in ("Isaac-FakeCartpole-Direct", "Isaac-FakeAnt"):
            gymnasium.registry.pop(task_id, None)
        sys.modules.pop("isaaclab_tasks", None)
    assert rows["Isaac-FakeCartpole-Direct"] == TaskRow(
        "Isaac-FakeCartpole-Direct",
        "isaaclab",
        4,
        1,
        "isaaclab_tasks:CartpoleEnvCfg + isaaclab_tasks.core.cartpole.agents:skrl_direct_ppo_cfg.yaml",
        "Isaac Lab",
    )
    assert (rows["Isaac-FakeAnt"].observations, rows["Isaac-FakeAnt"].config) == (None, "isaaclab_tasks:AntEnvCfg")


def test_nothing_is_listed_for_simulators_that_are_not_installed():
    assert list_tasks.isaaclab_rows() == [] and list_tasks.oige_rows() == []


def test_sizes_of_images_discrete_spaces_states_and_presets_are_listed():
    """Before: only int sizes showed; a camera task's [3, 96, 96] and a presets container listed as '-'."""
    import gymnasium

    from omni_sfp.envs.listing import _isaaclab_sizes, size_text

    assert size_text([3, 96, 96]) == "3x96x96" and size_text(4) == 4 and size_text(0) is None
    assert size_text(gymnasium.spaces.Discrete(2)) == "Discrete(2)" and size_text({3}) == "Discrete(3)"
    assert size_text(gymnasium.spaces.Box(0, 1, (64, 64, 3))) == "64x64x3"

    class Camera:  # Isaac Lab's camera env config: single-frame channels, stacked at env init
        observation_space, action_space, state_space, frame_stack = [3, 96, 96], 1, 4, 2

    class Presets:  # a presets container (what parse_env_cfg resolves): its default preset is listed
        default = Camera()

    assert _isaaclab_sizes(Presets) == ("6x96x96", 1, 4)
    from omni_sfp.envs.listing import TaskRow, format_table

    table = format_table([TaskRow("Isaac-Cam", "isaaclab", "6x96x96", 1, "cfg", states=4)])
    assert "6x96x96 + states 4" in table
