"""One source for every setting: omni_sfp/config/schema.py against the Hydra files, the validation, the panel, the Kit
manifest and the README. Each test here fails when a default, a range or a choice differs between them."""

from __future__ import annotations

import copy
import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from omni_sfp.config import generated, schema
from omni_sfp.kit import panel_model
from omni_sfp.run.compose import ConfigError, config_dir, load_config, validate

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED = ("Cartpole", "CartpolePositions", "LQR60x8", "ConstantCost")


def leaves(node, prefix="", root="train."):
    """``(dotted key, value)`` of every setting under ``node``; a mapping setting (a network spec) is one leaf."""
    for key, value in node.items():
        setting = schema.BY_KEY.get(f"{root}{prefix}{key}") or schema.BY_KEY.get(f"{prefix}{key}")
        if isinstance(value, dict) and not (setting is not None and setting.kind == "mapping"):
            yield from leaves(value, f"{prefix}{key}.", root)
        else:
            yield f"{prefix}{key}", value


def test_the_generated_files_are_up_to_date():
    """cfg/config.yaml, cfg/train/PPO.yaml, the README table and the manifest's [settings] equal what the
    schema renders: a hand edit of any of them, or a schema edit without `--write`, fails here."""
    assert generated.stale_files() == [], "run: python -m omni_sfp.schema --write"


@pytest.mark.parametrize(
    "change",
    [
        {"default": 43},
        {"minimum": 0},
        {"maximum": 2**31},
    ],
)
def test_the_drift_check_sees_a_changed_seed_default_or_range(monkeypatch, change):
    seed = schema.BY_KEY["seed"]
    changed = dataclasses.replace(seed, **change)
    monkeypatch.setattr(schema, "TOP", tuple(changed if s is seed else s for s in schema.TOP))
    monkeypatch.setattr(schema, "SETTINGS", schema.TOP + schema.TRAIN)
    stale = {p.name for p in generated.stale_files()}
    assert "README.md" in stale  # the table shows the default and the range
    if "default" in change:  # (the manifest follows the panel's toggles, built from the schema at import)
        assert "config.yaml" in stale


def test_the_drift_check_sees_a_changed_choice(monkeypatch):
    monkeypatch.setattr(
        schema,
        "TRAIN",
        tuple(
            dataclasses.replace(s, choices=(*s.choices, "never")) if s.key == "train.sfp.cache_check" else s
            for s in schema.TRAIN
        ),
    )
    monkeypatch.setattr(schema, "SETTINGS", schema.TOP + schema.TRAIN)
    assert {p.name for p in generated.stale_files()} == {"README.md", "PPO.yaml"}


@pytest.mark.parametrize("task", EMBEDDED)
def test_the_composed_config_has_exactly_the_schemas_keys(task):
    cfg = OmegaConf.to_container(load_config([f"task={task}"]), resolve=True)
    keys = {key for key, _ in leaves(cfg) if not key.startswith("task.") and key != "task_name"}
    assert keys == {s.key for s in schema.SETTINGS} - {"task"}


def test_the_default_task_runs_with_the_schemas_defaults():
    cfg = OmegaConf.to_container(load_config([]), resolve=True)
    values = dict(leaves(cfg))
    for setting in schema.SETTINGS:
        expected = cfg["task"]["name"] if setting.key == "task" else values[setting.key]
        assert expected == setting.default, setting.key


def test_task_train_files_inherit_the_base_and_hold_only_what_differs():
    """Each inherits PPO.yaml, or GenericPPO.yaml (a Gymnasium id's own file: Acrobot-v1PPO.yaml), and holds
    only what differs from the file it inherits."""
    train = config_dir() / "train"
    base = dict(leaves(yaml.safe_load((train / "PPO.yaml").read_text())))
    generic = yaml.safe_load((train / "GenericPPO.yaml").read_text())
    parents = {
        "PPO": base,
        "GenericPPO": {**base, **dict(leaves({k: v for k, v in generic.items() if k != "defaults"}))},
    }
    for path in sorted(train.glob("*PPO.yaml")):
        if path.name == "PPO.yaml":
            continue
        own = yaml.safe_load(path.read_text())
        defaults = own.pop("defaults")
        assert defaults in (["PPO", "_self_"], ["GenericPPO", "_self_"]), path.name
        parent = parents[defaults[0]]
        for key, value in leaves(own):
            assert f"train.{key}" in schema.BY_KEY, f"{path.name}: {key} is not a setting"
            assert value != parent[key], f"{path.name}: {key}={value} repeats {defaults[0]}.yaml"
            assert schema.setting(f"train.{key}").problem(value) is None, path.name


def test_every_range_and_choice_of_the_schema_is_enforced_by_validate():
    default = load_config([])
    checked = 0
    for setting in schema.SETTINGS:
        bad_values = []
        if setting.minimum is not None:
            bad_values.append(setting.minimum - (1 if setting.kind == "int" else 1e-6))
        if setting.above is not None:
            bad_values.append(setting.above)
        if setting.maximum is not None:
            bad_values.append(setting.maximum + (1 if setting.kind == "int" else 1e-6))
        if setting.choices is not None or setting.pattern is not None:
            bad_values.append("no such value")
        if setting.kind == "float":
            bad_values.append(math.inf)
        for bad in bad_values:
            if setting.key == "task":
                continue  # a Hydra group: test_validation checks unknown names
            cfg = copy.deepcopy(default)
            OmegaConf.update(cfg, setting.key, bad)
            with pytest.raises(ConfigError) as error:
                validate(cfg)
            assert str(error.value) == f"{setting.key}={bad!r}: {setting.problem(bad)}"
            checked += 1
    assert checked >= 25


def test_every_panel_toggle_takes_type_range_choices_and_default_from_the_schema():
    for toggle in panel_model.TOGGLES:
        setting = schema.setting(toggle.override or toggle.key)
        assert (toggle.kind, toggle.doc) == (setting.kind, setting.doc), toggle.key
        for field in ("minimum", "maximum", "above", "choices", "pattern"):
            assert getattr(toggle.spec, field) == getattr(setting, field), (toggle.key, field)
        if setting.default is not None:  # null ("the task's") becomes the default task's value: test_manifest
            assert panel_model.DEFAULTS[toggle.key] == (
                tuple(setting.default) if setting.kind == "ints" else setting.default
            ), toggle.key


def test_the_panel_accepts_exactly_what_validation_accepts_for_the_seed():
    for seed in (-1, 0, schema.SEED_MAX):
        panel_model.coerce("seed", seed)
        load_config([f"seed={seed}"])
    for seed in (-2, schema.SEED_MAX + 1):
        with pytest.raises(panel_model.ToggleError):
            panel_model.coerce("seed", seed)
        with pytest.raises(ConfigError):
            load_config([f"seed={seed}"])


def test_each_constant_is_defined_once():
    from omni_sfp.sfp import cache, network

    assert cache.CACHE_CHECKS is schema.CACHE_CHECKS is panel_model.CACHE_CHECKS
    assert network.INITS is schema.INITS
    assert list(network.ACTIVATIONS) == list(schema.ACTIVATIONS)
    assert all(network.ACTIVATIONS[name].__name__ == cls for name, cls in schema.ACTIVATIONS.items())
    assert schema.setting("train.models.activation").choices == tuple(schema.ACTIVATIONS)


def test_check_finite_choices_and_activations_are_the_schemas_own():
    from omni_sfp.envs import upstream
    from omni_sfp.ppo import agent

    assert agent.CHECK_FINITE is schema.CHECK_FINITE
    assert upstream.ACTIVATIONS == tuple(schema.ACTIVATIONS)


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("auto", ("auto", None)),
        ("cpu", ("cpu", None)),
        ("cuda", ("cuda", None)),
        ("cuda:0", ("cuda", 0)),
        ("cuda:12", ("cuda", 12)),
    ],
)
def test_the_device_grammar_has_one_parser(text, parsed):
    assert schema.parse_device(text) == parsed
    assert schema.setting("device").problem(text) is None


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:1 ", "mps", ""])
def test_the_device_parser_refuses_what_validation_refuses(text):
    with pytest.raises(ValueError, match=r"expected auto, cpu, cuda or cuda:N"):
        schema.parse_device(text)
    assert schema.setting("device").problem(text) is not None


@pytest.mark.parametrize(
    "value, text",
    [
        (3.0e-4, "0.0003"),
        (1e-5, "1.0e-05"),
        (2.0, "2.0"),
        (None, "null"),
        ("", '""'),
        ("auto", "auto"),
        ("true", '"true"'),
        ([256, 128], "[256, 128]"),
        (False, "false"),
    ],
)
def test_yaml_values_read_back_as_the_same_value(value, text):
    assert generated.yaml_value(value) == text
    assert OmegaConf.create(f"key: {text}").key == value


def test_the_command_checks_and_refuses_misuse():
    run = [sys.executable, "-m", "omni_sfp.schema"]
    checked = subprocess.run([*run, "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and checked.stdout == "", checked.stdout + checked.stderr
    misuse = subprocess.run([*run, "--frobnicate"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert misuse.returncode == 2 and misuse.stderr.count("\n") == 1 and "usage:" in misuse.stderr


def test_a_gymnasium_id_with_a_train_file_of_its_own_takes_it_and_others_take_the_generic_one():
    hopper = load_config(["task=gym:Hopper-v5"])
    assert hopper.task.name == "gym:Hopper-v5" and hopper.task.env.num_envs == 64
    assert (hopper.train.max_iterations, hopper.train.ppo.rollouts, hopper.train.ppo.learning_rate) == (245, 64, 5e-4)
    assert hopper.train.max_iterations * hopper.train.ppo.rollouts * hopper.task.env.num_envs >= 1_000_000
    pendulum = load_config(["task=gym:Pendulum-v1"])
    generic = yaml.safe_load((config_dir() / "train" / "GenericPPO.yaml").read_text())
    assert pendulum.train.ppo.learning_epochs == generic["ppo"]["learning_epochs"]
    assert pendulum.train.ppo.rollouts == generic["ppo"]["rollouts"]
    assert load_config(["task=gym:Hopper-v5", "train.ppo.rollouts=32"]).train.ppo.rollouts == 32  # overrides win


def pointers(text: str) -> list[str]:
    """The ``omni_sfp.x.y`` names a text sends its reader to, ``omni_sfp.x's NAME`` read as ``omni_sfp.x.NAME``."""
    import re

    from test_readme import DOTTED

    possessive = re.compile(r"(omni_sfp(?:\.\w+)+)'s? ([A-Z][A-Z0-9_]+)\b")
    return sorted({*DOTTED.findall(text), *(f"{module}.{name}" for module, name in possessive.findall(text))})


def test_every_module_and_name_the_schema_points_to_exists():
    """A comment or doc line of schema.py that sends the reader to ``omni_sfp.x.y`` (a module, or a name in
    one) names something that is there: a moved constant leaves no pointer behind (ELU_KERNELS once)."""
    from test_readme import _resolves

    names = pointers((ROOT / "omni_sfp" / "config" / "schema.py").read_text())
    assert "omni_sfp.compute.kernels.ELU_KERNELS" in names
    assert [name for name in names if not _resolves(name.rstrip("."))] == []
    old = "# The ELU's sides are omni_sfp.sfp.models' ELU_KERNELS; the allocator's are glibc's defaults"
    assert [name for name in pointers(old) if not _resolves(name)] == ["omni_sfp.sfp.models.ELU_KERNELS"]
