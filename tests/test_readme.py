"""The README stays true: its example model runs in skrl PPO with the cache hitting, and its config table
lists every key the configuration defines."""

import re
import runpy
from pathlib import Path

import torch
from omegaconf import OmegaConf
from ppo_driver import BOX_ACT, BOX_OBS, make_agent, run

from omni_sfp.run.compose import config_dir, load_config

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_example_model_is_served_by_the_cache(tmp_path):
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", README, re.DOTALL) if "class MyActorCritic" in b]
    example = tmp_path / "readme_example.py"
    example.write_text(block)
    model_class = runpy.run_path(str(example))["MyActorCritic"]
    torch.manual_seed(0)
    model = model_class(BOX_OBS, BOX_ACT, "cpu")
    run(make_agent({"policy": model, "value": model}), steps=8)
    assert model.trunk.stats.hits >= 8


def _leaf_keys(node, prefix=""):
    for key, value in node.items():
        if OmegaConf.is_dict(value):
            yield from _leaf_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_every_config_key_is_in_the_readme_table():
    cfg = load_config([])
    documented = set(re.findall(r"^\| `([^`]+)` \|", README, re.MULTILINE))
    keys = {k for k in _leaf_keys(cfg) if not k.startswith("task.") and k != "task_name"}
    assert keys - documented == set()
    assert "task" in documented and (config_dir() / "task").is_dir()


ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FILE = re.compile(r"(?<![\w/.-])((?:omni_sfp|tests|cfg|tasks|config|docs|\.ci)/[\w/.-]*\w)")
DOTTED = re.compile(r"(?<![\w./-])(omni_sfp(?:\.\w+)+)")
# names that are no path of the checkout: where a wheel installs tasks/ and cfg/, and the entry-point group
NOT_IN_THE_CHECKOUT = {"omni_sfp/cfg", "omni_sfp/tasks", "omni_sfp.task_sources"}


def _resolves(dotted: str) -> bool:
    """``omni_sfp.a.b.Name.attr``: the longest module prefix imports and the rest are attributes of it. A module
    that needs what only Kit has (``omni``, ``carb``) is read instead: its file, and the first name at its top level."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        source = _source_file(parts[:cut])
        if source is None:
            continue
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as error:
            if error.name and error.name.split(".")[0] != "omni_sfp":
                return not parts[cut:] or parts[cut] in _top_level_names(source)
            raise
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def _source_file(parts: list[str]) -> Path | None:
    """The module's file in the checkout, or where an import would find it (``omni_sfp.tasks`` is the root's
    ``tasks/``, see ``omni_sfp/__init__.py``)."""
    import importlib.util

    folder = ROOT.joinpath(*parts)
    for candidate in (folder / "__init__.py", folder.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    try:
        spec = importlib.util.find_spec(".".join(parts))
    except ModuleNotFoundError:
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def _top_level_names(source: Path) -> set[str]:
    import ast

    tree = ast.parse(source.read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
    return names | {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def test_every_path_and_module_the_docs_name_exists():
    """Each ``omni_sfp/...``, ``tests/...``, ``cfg/...`` path and each ``omni_sfp.x.y`` module or attribute named
    in README.md and docs/*.md resolves (so a move that leaves a document behind fails here)."""
    missing = []
    for document in DOCUMENTS:
        text = document.read_text()
        for path in sorted(set(FILE.findall(text))):
            if path.endswith("_") or path in NOT_IN_THE_CHECKOUT:  # a pattern (tests/test_<module>.py)
                continue
            if not any(c in path for c in "*<>") and not (ROOT / path.rstrip(".")).exists():
                missing.append(f"{document.name}: {path}")
        for dotted in sorted(set(DOTTED.findall(text))):
            if dotted not in NOT_IN_THE_CHECKOUT and not _resolves(dotted.rstrip(".")):
                missing.append(f"{document.name}: {dotted}")
    assert missing == []


def test_the_docs_commands_name_runnable_modules():
    commands = {m for d in DOCUMENTS for m in re.findall(r"python(?:\.sh)? -m (omni_sfp[\w.]*)", d.read_text())}
    assert {"omni_sfp.train", "omni_sfp.bench", "omni_sfp.list_tasks", "omni_sfp.schema"} <= commands
    import importlib.util

    assert [m for m in sorted(commands) if importlib.util.find_spec(m) is None] == []


BENCH_INLINE = re.compile(r"`{1,2}((?:\S*/)?python -m omni_sfp\.bench(?:\.\w+)?(?:\s[^`]*)?)`{1,2}")
BENCH_LINE = re.compile(r"^\s*((?:\S*/)?python -m omni_sfp\.bench(?:\.\w+)? .*)$", re.MULTILINE)


def bench_commands(text: str) -> list[str]:
    """Every ``python -m omni_sfp.bench...`` command in ``text``: inline code, and lines of code blocks."""
    return [" ".join(c.split()) for c in BENCH_INLINE.findall(text) + BENCH_LINE.findall(text) if "`" not in c]


def bench_command_problem(command: str) -> str | None:
    """Why the benchmark's parser refuses ``command`` (None: it parses; placeholders like ``<x>`` are skipped)."""
    import contextlib
    import io
    import shlex

    from omni_sfp.bench import __main__ as bench
    from omni_sfp.bench import gpu, soak
    from omni_sfp.bench.cli import Parser

    words = shlex.split(command, comments=True)
    module, argv = words[2], words[3:]
    if not argv and module == "omni_sfp.bench":  # the tool's name, not a command
        return None
    if any("<" in word or word == "..." for word in argv) or module == "omni_sfp.bench.worker":  # internal
        return None
    if module == "omni_sfp.bench" and argv[:1] == ["gpu"]:
        module, argv = "omni_sfp.bench.gpu", argv[1:]
    if module == "omni_sfp.bench.soak":
        parser = Parser(prog="soak")
        soak.add_arguments(parser)
    else:
        parser = {"omni_sfp.bench": bench.build_parser, "omni_sfp.bench.gpu": gpu.build_parser}[module]()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exit_info:
        return None if exit_info.code == 0 else err.getvalue().strip()
    return None


def test_every_benchmark_command_in_the_docs_and_docstrings_parses():
    """The README, docs/ (not docs/dev/, the dated logs, which quote commands as they were run), the package's
    docstrings and cfg/ comments show only benchmark commands that its parser takes (the subcommands and their
    own flags), so a renamed flag or mode leaves no stale command behind."""
    places = [*DOCUMENTS, *(ROOT / "docs" / "results").glob("*.md"), *(ROOT / "omni_sfp").rglob("*.py")]
    places += [
        *(ROOT / "cfg").rglob("*.yaml"),
        *(p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_readme.py"),
    ]
    found = {(p.relative_to(ROOT).as_posix(), c) for p in places for c in bench_commands(p.read_text())}
    assert len(found) > 10
    bad = sorted(
        f"{where}: `{command}`: {problem}" for where, command in found if (problem := bench_command_problem(command))
    )
    assert bad == []


def test_the_command_check_refuses_the_old_flags():
    assert bench_command_problem("python -m omni_sfp.bench --quality --seeds 3")
    assert bench_command_problem("python -m omni_sfp.bench table --quality-tasks Cartpole")
    assert bench_command_problem("python -m omni_sfp.bench quality --seeds 3 --tasks Cartpole") is None
    assert bench_commands("run `python -m omni_sfp.bench pixels\n--repetitions 5` here") == [
        "python -m omni_sfp.bench pixels --repetitions 5"
    ]


def test_the_user_docs_cite_no_issue_numbers_no_missing_notes_and_no_dated_logs():
    """Users cannot see the issue tracker or the design notes; dated measurement logs live in docs/dev/."""
    for document in DOCUMENTS:
        text = document.read_text()
        assert not re.search(r"(?i)\bissues? #?\d+", text), document.name
        assert "single-forward-pass.txt" not in text, document.name
    for page in ("benchmarks.md", "isaac-sim.md"):
        assert not re.search(r"\d\d:\d\d(-\d\d:\d\d)? UTC", (ROOT / "docs" / page).read_text()), page


def test_the_benchmark_page_opens_with_its_headline_table_and_reads_in_five_minutes():
    lines = (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    assert len(lines) <= 200
    table = next(i for i, line in enumerate(lines) if line.startswith("|"))
    assert table < 10 and not any(line.startswith("## ") for line in lines[:table])
    assert "SFP speedup" in "\n".join(lines[table : table + 12])


def test_the_summary_line_the_readme_shows_is_the_one_training_prints():
    """The README's greppable line has the runner's format (omni_sfp.run.progress.Summary.line), and any training
    time it quotes for the default run lies in the range it states."""
    from omni_sfp.run.progress import Summary

    (shown,) = re.findall(r"`(Training time: [^`]*)`", README.replace("\n", " "))
    pattern = re.escape(shown)
    for placeholder in re.findall(r"<[^>]+>", shown):
        pattern = pattern.replace(re.escape(placeholder), r"\S+")
    printed = Summary(32.9, 49800.0, 1.0, None, None, 50, None).line()
    assert re.fullmatch(pattern, printed), (shown, printed)
    low, high = map(float, re.search(r"takes (\d+)-(\d+) s\b", README).groups())
    quoted = [float(t) for t in re.findall(r"Training time: (\d+(?:\.\d+)?) s", README)]
    assert all(low <= t <= high for t in quoted), (quoted, low, high)
