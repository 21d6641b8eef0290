"""The task registry: specs, lookups and their errors, make_env for embedded and Gymnasium tasks, and the one
reader of entry points."""

import ast
from pathlib import Path

import pytest
import torch
from skrl.envs.wrappers.torch import Wrapper

from omni_sfp.envs import registry
from omni_sfp.envs.embedded import EmbeddedEnvWrapper
from omni_sfp.envs.registry import TaskSpec, UnknownTaskError, get_task, list_tasks, make_env, register_task
from omni_sfp.tasks.base import VecTask

BUILT_IN = ["Cartpole", "CartpolePositions", "ConstantCost", "LQR60x8"]


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made by a test vanish with it."""
    monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))


def simulator_factory(name, *, num_envs, device, seed, headless, task_cfg):
    """Stands in for make_oige_env / make_isaaclab_env: records how make_env called it."""
    return {"name": name, "num_envs": num_envs, "device": device, "seed": seed, "headless": headless, **task_cfg}


def test_built_in_tasks_are_listed_and_build_as_vec_tasks():
    assert list_tasks() == BUILT_IN
    assert list_tasks("embedded") == BUILT_IN
    assert list_tasks("isaaclab") == []
    for name in BUILT_IN:
        assert get_task(name).entry_point.startswith("omni_sfp.tasks.")
        assert isinstance(make_env(name, num_envs=2, device="cpu", seed=0).unwrapped, VecTask)


def test_list_tasks_rejects_unknown_kinds():
    with pytest.raises(ValueError, match="kind must be one of"):
        list_tasks("mujoco")


def test_unknown_task_message_names_it_suggests_close_matches_and_lists_known_tasks():
    with pytest.raises(UnknownTaskError) as error:
        get_task("Cartpol")
    message = str(error.value)
    assert isinstance(error.value, ValueError)
    assert "\n" not in message
    assert "'Cartpol'" in message and "did you mean 'Cartpole'" in message
    assert all(name in message for name in BUILT_IN)
    with pytest.raises(UnknownTaskError, match="did you mean 'gym:Pendulum-v1'"):
        get_task("gym:Pendulm-v1")
    with pytest.raises(UnknownTaskError, match="unknown task 'Humanoid'"):
        make_env("Humanoid", num_envs=2, device="cpu", seed=0)


def test_gymnasium_ids_resolve_without_registration():
    spec = get_task("gym:Pendulum-v1")
    assert (spec.kind, spec.entry_point) == ("gymnasium", "gymnasium:make_vec")
    assert "gym:Pendulum-v1" not in list_tasks()


@pytest.mark.parametrize(
    "fields, problem",
    [
        (("X", "mujoco", "pkg.mod:Task", ""), "kind must be one of"),
        (("X", "embedded", "pkg.mod.Task", ""), "'module:attr'"),
        (("X", "embedded", "os:system('ls')", ""), "'module:attr'"),
        (("X", "gymnasium", "gymnasium:make_vec", ""), "starts with 'gym:'"),
        (("gym:X", "embedded", "pkg.mod:Task", ""), "starts with 'gym:'"),
    ],
)
def test_task_spec_rejects_malformed_fields(fields, problem):
    with pytest.raises(ValueError, match=problem):
        TaskSpec(*fields)


def test_register_task_is_idempotent_but_refuses_a_second_meaning(scratch_registry):
    spec = TaskSpec("Ant", "oige", f"{__name__}:simulator_factory", "an Ant")
    assert register_task(spec) is spec
    register_task(TaskSpec("Ant", "oige", f"{__name__}:simulator_factory", "an Ant"))
    assert list_tasks("oige") == ["Ant"]
    with pytest.raises(ValueError, match="already registered"):
        register_task(TaskSpec("Ant", "isaaclab", f"{__name__}:simulator_factory", "another Ant"))


def test_simulator_tasks_call_their_factory_with_make_env_arguments(scratch_registry):
    register_task(TaskSpec("Ant", "isaaclab", f"{__name__}:simulator_factory", "an Ant", kwargs={"a": 1, "b": 2}))
    made = make_env("Ant", num_envs=3, device="cpu", seed=7, headless=False, task_cfg={"b": 5})
    assert made == {"name": "Ant", "num_envs": 3, "device": "cpu", "seed": 7, "headless": False, "a": 1, "b": 5}


def test_make_env_builds_embedded_tasks_with_task_cfg_over_defaults():
    env = make_env("Cartpole", num_envs=4, device="cpu", seed=3, task_cfg={"max_episode_length": 7})
    assert isinstance(env, EmbeddedEnvWrapper)
    assert (env.num_envs, env.max_episode_length, env.unwrapped.seed) == (4, 7, 3)
    with pytest.raises(ValueError, match="'Cartpole' does not take max_effrot; it takes .*max_effort"):
        make_env("Cartpole", num_envs=4, device="cpu", seed=3, task_cfg={"max_effrot": 1.0})
    with pytest.raises(ValueError, match="num_envs"):
        make_env("Cartpole", num_envs=0, device="cpu", seed=3)


def test_gymnasium_pendulum_steps_through_make_env_with_skrl_shapes():
    env = make_env("gym:Pendulum-v1", num_envs=3, device="cpu", seed=0, task_cfg={"g": 9.81})
    assert isinstance(env, Wrapper)
    assert (env.num_envs, env.device) == (3, torch.device("cpu"))
    assert env.observation_space.shape == (3,) and env.action_space.shape == (1,)
    obs, _ = env.reset()
    assert obs.shape == (3, 3)
    for step in range(1, 201):  # Pendulum's time limit is 200 steps
        obs, reward, terminated, truncated, _ = env.step(torch.zeros(3, 1))
        assert obs.shape == (3, 3) and reward.shape == (3, 1) and reward.dtype == torch.float32
        assert terminated.shape == truncated.shape == (3, 1) and terminated.dtype == torch.bool
        assert truncated.all() == (step == 200)
    env.close()


def test_gymnasium_envs_are_seeded_by_make_env():
    def first_obs(seed):
        return make_env("gym:Pendulum-v1", num_envs=2, device="cpu", seed=seed).reset()[0]

    assert torch.equal(first_obs(5), first_obs(5))
    assert not torch.equal(first_obs(5), first_obs(6))


def test_a_task_source_that_fails_to_load_is_named_where_its_tasks_are_missing(monkeypatch, capsys):
    """A broken adapter (its entry point's import fails) used to vanish silently: ``task=Ant`` said only
    "unknown task". The unknown-task line and ``python -m omni_sfp.list_tasks`` now say which source failed."""
    from importlib.metadata import EntryPoint

    from omni_sfp.envs import listing as list_tasks_cli

    broken = EntryPoint(name="broken", value="no_such_module_xyz:register", group=registry.SOURCES_GROUP)
    monkeypatch.setattr(registry.importlib.metadata, "entry_points", lambda group: [broken])
    monkeypatch.setattr(registry, "_SOURCES", {"loaded": False, "errors": []})
    with pytest.raises(UnknownTaskError) as error:
        get_task("Ant")
    assert "not loaded: task source 'broken' (no_such_module_xyz:register)" in str(error.value)
    assert "no_such_module_xyz" in str(error.value).split("not loaded:")[1] and "\n" not in str(error.value)
    assert list_tasks_cli.main([]) == 0
    assert "not loaded: task source 'broken'" in capsys.readouterr().err


def test_gym_module_id_imports_the_module_then_resolves_the_id(tmp_path, monkeypatch):
    """``gym:<module>:<Id>``, as ``gymnasium.make`` resolves it; before: "unknown Gymnasium id"."""
    (tmp_path / "omni_sfp_user_envs.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('UserCartPole-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv',"
        " max_episode_steps=50)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = registry.get_task("gym:omni_sfp_user_envs:UserCartPole-v0")
    assert spec.kind == "gymnasium"
    env = registry.make_env(spec.name, num_envs=2, device="cpu", seed=0)
    assert env.num_envs == 2 and env.action_space.n == 2
    env.close()
    with pytest.raises(registry.UnknownTaskError, match="registers no Gymnasium id 'UserCartPol-v0'"):
        registry.get_task("gym:omni_sfp_user_envs:UserCartPol-v0")
    with pytest.raises(registry.UnknownTaskError, match="cannot import module 'omni_sfp_no_such_module'"):
        registry.get_task("gym:omni_sfp_no_such_module:X-v0")


def test_a_missing_optional_package_is_one_line_naming_it(tmp_path, monkeypatch):
    """An env whose constructor imports a package that is not installed (Isaac Lab's terrain and trimesh)."""
    (tmp_path / "omni_sfp_needs_pkg.py").write_text(
        "import gymnasium\n"
        "class NeedsPackage(gymnasium.Env):\n"
        "    def __init__(self):\n"
        "        import omni_sfp_absent_package  # noqa: F401\n"
        "gymnasium.register('NeedsPackage-v0', entry_point=NeedsPackage)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(registry.MissingDependencyError, match="'omni_sfp_absent_package', which is not installed"):
        registry.make_env("gym:omni_sfp_needs_pkg:NeedsPackage-v0", num_envs=1, device="cpu", seed=0)


def test_lunar_lander_without_box2d_says_how_to_install_it(capsys):
    pytest.importorskip("gymnasium")
    try:
        import Box2D  # noqa: F401

        pytest.skip("Box2D is installed here")
    except ImportError:
        pass
    from omni_sfp.train import main

    assert main(["task=gym:LunarLander-v3", "num_envs=2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "Box2D is not installed" in line and "gymnasium[box2d]" in line


def test_entry_points_are_read_by_one_helper():
    assert registry.load_entry_point("omni_sfp.tasks.cartpole:Cartpole") is get_task("Cartpole").load()
    assert registry.load_entry_point("omni_sfp.envs.registry:TaskSpec.load") is TaskSpec.load
    with pytest.raises(AttributeError):
        registry.load_entry_point("omni_sfp.envs.registry:NoSuchThing")


def _splits_on_a_colon(node) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("split", "partition", "rpartition")
        and any(isinstance(a, ast.Constant) and a.value == ":" for a in node.args)
    )


def _imports_by_name(node) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"


def entry_point_readers(files: dict[str, str]) -> list[str]:
    """``file:function`` for each function that reads a ``"module:attr"`` string itself: it splits on ':' and
    imports a module by name."""
    found = []
    for name, source in files.items():
        for function in ast.walk(ast.parse(source)):
            if isinstance(function, ast.FunctionDef):
                nodes = list(ast.walk(function))
                if any(map(_splits_on_a_colon, nodes)) and any(map(_imports_by_name, nodes)):
                    found.append(f"{name}:{function.name}")
    return found


def test_no_module_reads_an_entry_point_string_but_the_registry():
    """``"module:attr"`` is read in one place, :func:`omni_sfp.envs.registry.load_entry_point` (a ``gym:<module>:<Id>``
    task name imports its module for the ids it registers, which is no entry point)."""
    root = Path(__file__).resolve().parent.parent / "omni_sfp"
    files = {str(p.relative_to(root.parent)): p.read_text() for p in sorted(root.rglob("*.py"))}
    assert sorted(entry_point_readers(files)) == [
        "omni_sfp/envs/registry.py:_gymnasium_spec",
        "omni_sfp/envs/registry.py:load_entry_point",
    ]
    copy = 'def f(spec):\n    module, attr = spec.entry_point.split(":")\n    return importlib.import_module(module)\n'
    assert entry_point_readers({"video.py": copy}) == ["video.py:f"]
