"""``python -m omni_sfp.bench.gpu``: the one prepared run for a lent GPU (issue 14, item 5).

It times the reference preset (the reference table's 4096 envs and 3840 steps) for rl_games fp32 / mixed and
omni-sfp double pass / SFP fp32 / mixed, with the floor and GEMM-ceiling rows, interleaved; runs the tests'
CUDA paths first (``pytest tests/test_cuda.py`` unless ``--tests`` says otherwise); and writes both, with the GPU named, into
``docs/benchmarks.md`` between the ``gpu-table`` markers (the rest of the file is left as it is). Device
time is scarce: ``--updates`` and ``--repetitions`` size the run (the defaults fit about 10 minutes on one
recent GPU). ``--device cpu --quick`` runs the same script end to end on a CPU in a minute, which is how it
stays tested without a GPU. Bad arguments: one line, exit code 2.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from omni_sfp.bench.__main__ import Parser, _meta, _positive
from omni_sfp.bench.configs import PRESETS, select_rows

ROWS = (
    "rlgames-fp32",
    "rlgames-mixed",
    "omni-double-fp32",
    "omni-double-mixed",
    "omni-sfp-fp32",
    "omni-sfp-mixed",
    "floor-fp32",
    "floor-mixed",
    "ceiling-fp32",
    "ceiling-mixed",
)
START, END = "<!-- gpu-table:start -->", "<!-- gpu-table:end -->"
DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


class GPUParser(Parser):
    name = "omni_sfp.bench.gpu"


def build_parser() -> Parser:
    parser = GPUParser(prog="python -m omni_sfp.bench.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="the quick preset instead of the reference one")
    parser.add_argument("--updates", type=_positive, help="timed updates per run (reference preset: 240 = 3840 steps)")
    parser.add_argument("--repetitions", type=_positive, default=1, help="interleaved runs per row (default 1)")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated row ids (default: issue 14's set)")
    parser.add_argument(
        "--tests", default="tests/test_cuda.py", help="pytest arguments selecting the tests to run; '' for none"
    )
    parser.add_argument("--doc", type=Path, default=DOC, help="the markdown file whose gpu-table section is rewritten")
    parser.add_argument("--out", default="bench_results", help="folder for the JSON, markdown and PNG outputs")
    return parser


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return (
            f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}, driver capability "
            f"{'.'.join(map(str, torch.cuda.get_device_capability(0)))})"
        )
    return "no GPU: a CPU dry run of the script (--device cpu)"


def run_tests(arguments: str) -> tuple[int, str]:
    """The selected tests in a fresh pytest process; returns its exit code and its summary line."""
    if not arguments.strip():
        return 0, "no tests selected (--tests '')"
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *shlex.split(arguments)]
    completed = subprocess.run(command, cwd=root, capture_output=True, text=True)
    print(completed.stdout + completed.stderr, file=sys.stderr, flush=True)  # the whole verdict in the run's log
    lines = [line for line in completed.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else f"pytest printed nothing (exit {completed.returncode})"
    if completed.returncode == 5:  # pytest: no tests collected
        return 0, f"no test matched `{arguments}`"
    return completed.returncode, f"`pytest {arguments}`: {summary}"


def section(report_markdown: str, meta: dict, gpu: str, tests: str) -> str:
    """The text between the markers: when, where, the test result and the bench's own table."""
    body = report_markdown.split("\n", 1)[1].strip()  # the bench's title line gives way to ours
    return "\n".join(
        [
            START,
            f"### GPU run: {gpu}, {meta['date']}",
            "",
            f"Written by `{meta['gpu_command']}`. Tests: {tests}.",
            "",
            body,
            END,
        ]
    )


def write_section(doc: Path, text: str) -> None:
    """Replace the marked section of ``doc`` (appended at the end the first time), atomically."""
    current = doc.read_text() if doc.is_file() else ""
    if START in current and END in current:
        head, rest = current.split(START, 1)
        updated = head + text + rest.split(END, 1)[1]
    else:
        updated = current.rstrip("\n") + "\n\n" + text + "\n"
    temporary = doc.with_suffix(doc.suffix + ".tmp")
    temporary.write_text(updated)
    os.replace(temporary, doc)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine (use --device cpu --quick for a dry run)")
    preset = "quick" if args.quick else "reference"
    work = PRESETS[preset][0].replace(updates=args.updates)
    try:
        rows = select_rows(args.rows)
        work.check()
    except ValueError as error:
        parser.error(str(error))
    if any(row.framework == "rlgames" for row in rows) and importlib.util.find_spec("rl_games") is None:
        parser.error("rl_games is not installed: pip install 'omni-sfp[bench]', or leave its rows out (--rows)")
    from omni_sfp.bench import report as report_mod
    from omni_sfp.bench.timing import WorkerError, run_interleaved

    threads = len(os.sched_getaffinity(0))
    meta = _meta(args.device, threads, argv)
    meta["gpu_command"] = shlex.join(["python", "-m", "omni_sfp.bench.gpu", *argv])
    meta["env"] = f"ConstantCost (fixed work per step), {work.episode_length}-step episodes with staggered starts"
    meta["load_before"] = os.getloadavg()[0]
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    # the tests first: on a lease their verdict is the scarcer result, and a timed part cut short keeps it
    code, tests = run_tests(args.tests)
    log(f"[bench] tests: {tests}")
    with tempfile.TemporaryDirectory(prefix="omni_sfp_gpu_") as scratch:
        try:
            runs = run_interleaved(
                rows,
                work,
                repetitions=args.repetitions,
                log=log,
                device=args.device,
                seed=0,
                threads=threads,
                replay=None,
                rlgames_compile=False,
                scratch=Path(scratch),
            )
        except WorkerError as error:
            print(f"omni_sfp.bench.gpu: error: {error}", file=sys.stderr)
            return 1
    meta["load_after"] = os.getloadavg()[0]
    entries = report_mod.summarize(rows, runs, work)
    report = {
        "preset": preset,
        "meta": meta,
        "work": dataclasses.asdict(work),
        "repetitions": args.repetitions,
        "rows": entries,
        "targets": report_mod.targets(entries, work),
    }
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = report_mod.save(report, Path(args.out) / f"bench-gpu-{preset}-{stamp}")
    write_section(args.doc, section(report_mod.markdown(report), meta, device_name(args.device), tests))
    log(f"[bench] wrote {', '.join(map(str, paths))} and the gpu-table section of {args.doc}; tests: {tests}")
    return 1 if code else 0


if __name__ == "__main__":
    sys.exit(main())
