"""The files written from the settings' schema (:mod:`omni_sfp.config.schema`) and the panel's toggles
(:mod:`omni_sfp.config.toggles`): cfg/config.yaml, cfg/train/PPO.yaml, the README's configuration table and
extension.toml's ``[settings]``. ``python -m omni_sfp.schema --write`` regenerates them, ``--check`` lists the
stale ones (CI runs it; tests/config/test_schema.py too).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from omni_sfp.config import schema
from omni_sfp.config.schema import AUTO, Setting
from omni_sfp.config.toggles import TOGGLES

ROOT = Path(__file__).resolve().parents[2]  # the source checkout: extension.toml, README.md, cfg/
GENERATED = "GENERATED from omni_sfp/config/schema.py by `python -m omni_sfp.schema --write`: edit the schema, not this"


def yaml_value(value: Any) -> str:
    """``value`` as YAML that OmegaConf reads back as the same Python value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}{e}{exponent}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return (
            value
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", value) and value not in ("null", "true", "false")
            else f'"{value}"'
        )
    return str(value)


def _yaml_tree(settings: tuple[Setting, ...], strip: str) -> list[str]:
    lines: list[str] = []
    opened: list[str] = []
    for s in settings:
        *parents, leaf = s.key.removeprefix(strip).split(".")
        common = 0
        while common < min(len(parents), len(opened)) and parents[common] == opened[common]:
            common += 1
        for depth in range(common, len(parents)):
            lines.append(f"{'  ' * depth}{parents[depth]}:")
        opened = parents
        entry = f"{'  ' * len(parents)}{leaf}: {yaml_value(s.default)}"
        lines.append(f"{entry:<40} # {s.doc}{_choices_note(s)}")
    return lines


def _choices_note(s: Setting) -> str:
    if s.kind == "bool_auto":
        return f" [true | false | {AUTO}]"
    if s.choices is not None:
        return f" [{' | '.join(s.choices)}]"
    if s.grammar is not None and s.key != "task":
        return f" [{s.grammar}]"
    return ""


def render_config_yaml() -> str:
    return "\n".join(
        [
            f"# {GENERATED} file.",
            "# omni-sfp training configuration (Hydra, OmniIsaacGymEnvs' layout: config.yaml + task/<Task>.yaml +",
            "# train/<Task>PPO.yaml). Override any key on the command line: `python -m omni_sfp.train task=LQR60x8",
            "# num_envs=256 train.mixed_precision=true`. Every key is validated before any simulation starts.",
            "defaults:",
            f"  - task: {schema.TOP[0].default}",
            "  - train: ${task}PPO",
            "  - _self_",
            "",
            "task_name: ${task.name}                  # read-only: the task's registered name",
            *_yaml_tree(tuple(s for s in schema.TOP if s.key != "task"), ""),
            "",
        ]
    )


def render_train_yaml() -> str:
    return "\n".join(
        [
            f"# {GENERATED} file.",
            "# The PPO settings every task starts from: cfg/train/<Task>PPO.yaml lists `PPO` in its defaults and holds",
            "# only what that task changes. Keys mirror skrl 2's PPO_CFG where they have a counterpart (ppo.*).",
            *_yaml_tree(schema.TRAIN, "train."),
            "",
        ]
    )


def render_readme_table() -> str:
    rows = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for s in schema.SETTINGS:
        default = "null" if s.default is None else yaml_value(s.default)
        rows.append(f"| `{s.key}` | `{default}` | {_markdown(s.allowed())} | {_markdown(s.doc)} |")
        if s.key == "task":
            rows.append(
                "| `task.env.*` | per task | the task's constructor arguments | see "
                "`cfg/task/<Task>.yaml`; add one with `+task.env.<argument>=` |"
            )
    return "\n".join(rows)


def _markdown(text: str) -> str:
    """Words holding ``<...>`` (``runs/<task>``, ``gym:<Id>``) in backticks, so that Markdown shows them."""
    return re.sub(r"[^\s,;()]*<[^\s,;()]*", lambda m: f"`{m.group(0)}`", text)


def render_manifest_settings() -> str:

    lines = ["[settings]"]
    for t in TOGGLES:
        value = yaml_value(t.default)  # TOML spells these values as YAML does
        if isinstance(t.default, (list, tuple)):
            value = "[" + ", ".join(str(v) for v in t.default) + "]"
        elif isinstance(t.default, str):
            value = f'"{t.default}"'
        entry = f'exts."omni.sfp".{t.key} = {value}'
        target = f"{t.override}=" if t.override else "launcher only"
        doc = t.doc.split("; null:")[0]  # the panel holds a number, never null
        lines.append(f"{entry:<47} # {target}: {doc}")
    return "\n".join(lines)


README_BEGIN = (
    "<!-- settings table: GENERATED by `python -m omni_sfp.schema --write` from omni_sfp/config/schema.py -->"
)
README_END = "<!-- end of the generated settings table -->"
MANIFEST_BEGIN = (
    "# ---- GENERATED by `python -m omni_sfp.schema --write` from omni_sfp/config/schema.py and toggles.TOGGLES"
)
MANIFEST_END = "# ---- end of the generated [settings]"


def _replace_block(text: str, begin: str, end: str, block: str, name: str) -> str:
    head, found, rest = text.partition(begin + "\n")
    _, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise ValueError(f"{name}: the markers of the generated block are missing ({begin!r} ... {end!r})")
    return f"{head}{begin}\n{block}\n{end}{tail}"


def generated_files() -> dict[Path, str]:
    """Each generated file and the text it must have."""
    readme, manifest = ROOT / "README.md", ROOT / "extension.toml"
    return {
        ROOT / "cfg" / "config.yaml": render_config_yaml(),
        ROOT / "cfg" / "train" / "PPO.yaml": render_train_yaml(),
        readme: _replace_block(readme.read_text(), README_BEGIN, README_END, render_readme_table(), "README.md"),
        manifest: _replace_block(
            manifest.read_text(), MANIFEST_BEGIN, MANIFEST_END, render_manifest_settings(), "extension.toml"
        ),
    }


def stale_files() -> list[Path]:
    return [path for path, text in generated_files().items() if not path.is_file() or path.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["--write"], ["--check"]):
        print(
            "usage: python -m omni_sfp.schema --write | --check  (regenerate, or list, the files derived from "
            "the settings schema)",
            file=sys.stderr,
        )
        return 2
    if not (ROOT / "extension.toml").is_file():
        print(f"omni_sfp.schema: error: {ROOT} is not a source checkout (no extension.toml)", file=sys.stderr)
        return 2
    stale = stale_files()
    if argv == ["--write"]:
        files = generated_files()
        for path in stale:
            path.write_text(files[path])
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    for path in stale:
        print(f"stale: {path.relative_to(ROOT)} (run python -m omni_sfp.schema --write)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
