"""``python -m omni_sfp.bench.gpu``: the one prepared run for a lent GPU, sized to fit 10 minutes.

In order, each part written to ``--out`` as soon as it ends (a run cut short keeps what it finished):

1. the CUDA tests (``tests/test_cuda.py``: the cache, mixed precision, the captured step against the eager one);
2. one eager and one captured update under ``torch.profiler``: per minibatch, kernel time against wall time;
3. the reference preset (the big network, 4096 envs) and 4. the isaaclab preset (Isaac Lab's Humanoid sizes),
   interleaved rows, each run in a fresh process.

It writes ``gpu.md`` (and ``gpu.json``) in ``--out``; docs/benchmarks.md links the committed copy,
``docs/results/gpu.md``. ``--budget`` bounds the whole run: no timed run starts after it. ``--device cpu --quick``
runs the same script end to end on a CPU in a few minutes, which is how CI keeps it working. Bad arguments: one
line, exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXIT_USAGE = 2
ROOT = Path(__file__).resolve().parents[2]
# the rows of each preset: what the captured step changes, against rl_games and the floor (sized for the budget)
REFERENCE_ROWS = (
    "omni-sfp-mixed-captured",
    "omni-double-mixed-captured",
    "omni-sfp-fp32-captured",
    "omni-double-fp32-captured",
    "omni-sfp-mixed",
    "rlgames-mixed",
    "floor-mixed",
    "floor-fp32",
)
ISAACLAB_ROWS = (
    "omni-sfp-mixed-captured",
    "omni-sfp-fp32-captured",
    "omni-sfp-mixed",
    "omni-double-mixed-captured",
    "rlgames-mixed",
    "rlgames-fp32",
    "skrl-sfp-mixed",
    "bare-ppo-mixed",
    "floor-mixed",
)
QUICK_ROWS = ("omni-sfp-fp32-captured", "omni-sfp-fp32", "floor-fp32")  # a dry run: every kind of row, seconds each


class GPUParser(argparse.ArgumentParser):
    """argparse with one-line errors, as ``omni_sfp.train`` reports them."""

    def error(self, message: str):
        print(f"omni_sfp.bench.gpu: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _positive(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def build_parser() -> GPUParser:
    parser = GPUParser(prog="python -m omni_sfp.bench.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and three rows a preset: a dry run")
    parser.add_argument("--updates", type=_positive, help="timed updates per run (default: 20 reference, 10 isaaclab)")
    parser.add_argument("--repetitions", type=_positive, default=1, help="interleaved runs per row (default 1)")
    parser.add_argument("--budget", type=_positive, default=540, help="seconds after which no timed run starts")
    parser.add_argument("--tests", default="tests/test_cuda.py", help="pytest arguments for part 1; '' for none")
    parser.add_argument("--parts", default="tests,profile,reference,isaaclab", help="which parts to run, in order")
    parser.add_argument("--out", default="bench_results/gpu", help="folder for gpu.md and gpu.json")
    return parser


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return (
            f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}, compute capability "
            f"{'.'.join(map(str, torch.cuda.get_device_capability(0)))})"
        )
    return "no GPU: a CPU dry run of the script (--device cpu)"


def run_tests(arguments: str) -> tuple[int, str]:
    """The selected tests in a fresh pytest process; returns its exit code and its summary line."""
    if not arguments.strip():
        return 0, "no tests selected (--tests '')"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *shlex.split(arguments)]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(completed.stdout + completed.stderr, file=sys.stderr, flush=True)  # the whole verdict in the run's log
    lines = [line for line in completed.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else f"pytest printed nothing (exit {completed.returncode})"
    if completed.returncode == 5:  # pytest: no tests collected
        return 0, f"no test matched `{arguments}`"
    return completed.returncode, f"`pytest {arguments}`: {summary}"


class Results:
    """The run's results file, rewritten after every part."""

    def __init__(self, out: Path, header: list[str]) -> None:
        self.out, self.header, self.sections, self.data = out, header, [], {}
        out.mkdir(parents=True, exist_ok=True)

    def add(self, title: str, text: str, data) -> None:
        self.sections.append(f"## {title}\n\n{text.strip()}\n")
        self.data[title] = data
        (self.out / "gpu.md").write_text("\n".join(self.header) + "\n\n" + "\n".join(self.sections))
        (self.out / "gpu.json").write_text(json.dumps(self.data, indent=2, default=str))


def _preset_table(preset: str, row_ids, args, device: str, threads: int, deadline: float, log) -> tuple[str, dict]:
    from omni_sfp.bench import report as report_mod
    from omni_sfp.bench.cli import meta as _meta
    from omni_sfp.bench.configs import ROWS, preset_work
    from omni_sfp.bench.timing import run_interleaved

    work, _ = preset_work("quick" if args.quick else preset, device)
    work = work.replace(updates=args.updates or (10 if preset == "isaaclab" else 20))
    rows = [ROWS[r] for r in (QUICK_ROWS if args.quick else row_ids)]
    if importlib.util.find_spec("rl_games") is None:
        rows = [row for row in rows if row.framework != "rlgames"]
    meta = _meta(device, threads, sys.argv[1:])
    meta["load_before"] = os.getloadavg()[0]
    meta["env"] = f"ConstantCost (fixed work per step), {work.episode_length}-step episodes with staggered starts"
    with tempfile.TemporaryDirectory(prefix="omni_sfp_gpu_") as scratch:
        runs = run_interleaved(
            rows,
            work,
            repetitions=args.repetitions,
            log=log,
            deadline=deadline,
            device=device,
            seed=0,
            threads=threads,
            replay=None,
            rlgames_compile=preset == "isaaclab",  # rl_games' default: its model compiled
            scratch=Path(scratch),
        )
    meta["load_after"] = os.getloadavg()[0]
    rows = [row for row in rows if row.id in runs]
    entries = report_mod.summarize(rows, runs, work)
    report = {
        "preset": preset,
        "meta": meta,
        "work": dataclasses.asdict(work),
        "repetitions": args.repetitions,
        "rows": entries,
        "targets": report_mod.targets(entries, work),
    }
    body = report_mod.markdown(report).split("\n", 1)[1].strip()  # its title gives way to the section's
    return body, report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(parts) - {"tests", "profile", "reference", "isaaclab"})
    if unknown:
        parser.error(f"--parts: unknown part {', '.join(unknown)}; parts: tests, profile, reference, isaaclab")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine (use --device cpu --quick for a dry run)")
    started = time.monotonic()
    deadline = started + args.budget
    threads = len(os.sched_getaffinity(0))
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    import datetime

    from omni_sfp.bench.configs import preset_work

    results = Results(
        Path(args.out),
        [
            f"# GPU run: {device_name(args.device)}, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
            "",
            f"Written by `{shlex.join(['python', '-m', 'omni_sfp.bench.gpu', *argv])}`; torch {torch.__version__}.",
        ],
    )
    code = 0
    for part in parts:
        begun = time.monotonic()
        if part == "tests":
            code, summary = run_tests(args.tests)
            results.add("Tests", summary, {"exit": code, "summary": summary})
        elif part == "profile":
            from omni_sfp.bench import profile

            work = preset_work("quick" if args.quick else "reference", args.device)[0]
            found = [
                profile.profile_update(work, device=args.device, mixed_precision=mixed, captured=captured)
                for mixed in ((False,) if args.quick else (True, False))
                for captured in (False, True)
            ]
            results.add("One update under torch.profiler (reference preset)", profile.markdown(found), found)
        else:
            body, report = _preset_table(
                part,
                REFERENCE_ROWS if part == "reference" else ISAACLAB_ROWS,
                args,
                args.device,
                threads,
                deadline,
                log,
            )
            results.add(f"The {part} preset", body, report)
        log(f"[bench.gpu] {part}: {time.monotonic() - begun:.0f} s")
    log(f"[bench.gpu] wrote {Path(args.out) / 'gpu.md'} in {time.monotonic() - started:.0f} s")
    return 1 if code else 0


if __name__ == "__main__":
    sys.exit(main())
