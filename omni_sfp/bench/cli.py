"""What every command of the benchmark shares: the one-line error parser, the argument types, the machine's
description that heads every report, and the progress log."""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2, as ``omni_sfp.train`` reports them."""

    name = "omni_sfp.bench"

    def error(self, message: str):
        print(f"{self.name}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def positive(text: str) -> int:
    """An integer >= 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def units(text: str) -> tuple[int, ...]:
    """Layer sizes, ``256,128,64`` (argparse type)."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of layer sizes, e.g. 256,128,64"
        ) from None
    if any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: every layer size must be >= 1")
    return sizes


def meta(device: str, threads: int, argv: list[str]) -> dict:
    """When, where (CPU model, family and model number, SIMD flags, cores), with what software, and the command:
    the header of every report."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    from omni_sfp.compute.cpu_choices import cpu_identity, simd_flags

    identity = cpu_identity()
    kind = ", ".join(
        f"{k.replace('_number', '')} {identity[k]}" for k in ("family", "model_number", "stepping") if k in identity
    )
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": identity["model"] + (f" ({kind})" if kind else ""),
        "cpu_flags": simd_flags(identity),
        "cores": len(os.sched_getaffinity(0)),
        "device": device,
        "threads": threads,
        "python": platform.python_version(),
        "torch": installed("torch"),
        "skrl": installed("skrl"),
        "rl_games": installed("rl-games"),
        "command": shlex.join(["python", "-m", "omni_sfp.bench", *argv]),
    }


def log(line: str) -> None:
    """Progress goes to stderr: stdout carries only the tables."""
    print(line, file=sys.stderr, flush=True)
