"""From timed runs to the table: statistics, the reference table's slowing factors, issue 7's target ratios, and
the markdown / JSON / PNG outputs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from omni_sfp.bench.configs import UNALIGNED, Row, Work
from omni_sfp.compute.cpu_choices import SIMD_FLAGS

FRAMEWORKS = ("rlgames", "omni", "skrl")  # the rows that train through a framework (not bare PPO, floor, ceiling)

FP32_TARGET_SMALL_NETWORK = (256, 128, 64)  # issue 7 asks more of the fp32 ratio on this network


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max: the median resists the odd run slowed by a neighbour process."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return None if numerator is None or not denominator else numerator / denominator


def summarize(rows: list[Row], runs: dict[str, list[dict[str, Any]]], work: Work) -> list[dict[str, Any]]:
    """One entry per row: per-run and per-update spread, the slowing factors and the SFP speedup.

    ``runs[row.id]`` holds the worker results of that row's repetitions (``seconds`` = the timed window).
    """
    entries = []
    for row in rows:
        seconds = [run["seconds"] for run in runs[row.id]]
        entries.append(
            {
                "id": row.id,
                "label": row.label,
                "framework": row.framework,
                "precision": row.precision,
                "single_forward_pass": row.single_forward_pass,
                "time_limit_bootstrap": row.time_limit_bootstrap,
                "effective_precision": runs[row.id][0]["precision"],
                "runs_s": seconds,
                "run_s": spread(seconds),
                "update_s": spread([s / work.updates for s in seconds]),
                "info": [run["info"] for run in runs[row.id]],
            }
        )
        if all("rollout_seconds" in run for run in runs[row.id]):  # rows that step the env
            steps = work.num_envs * work.horizon
            entries[-1]["rollout_sps"] = spread(
                [steps * len(run["rollout_seconds"]) / sum(run["rollout_seconds"]) for run in runs[row.id]]
            )
            entries[-1]["learning_s"] = spread(
                [sum(run["learning_seconds"]) / len(run["learning_seconds"]) for run in runs[row.id]]
            )
        if all("first_update_s" in run for run in runs[row.id]):
            entries[-1]["first_update_s"] = spread([run["first_update_s"] for run in runs[row.id]])
        if all("cpu_seconds" in run for run in runs[row.id]):
            entries[-1]["cpu_update_s"] = spread([run["cpu_seconds"] / work.updates for run in runs[row.id]])
        flops = runs[row.id][0].get("flops_per_update")
        entries[-1]["tflops"] = None if flops is None else flops / entries[-1]["update_s"]["median"] / 1e12
    median = {e["id"]: e["run_s"]["median"] for e in entries}
    ceiling = {e["precision"]: e["tflops"] for e in entries if e["framework"] == "ceiling"}
    for entry in entries:
        tlb = "-tlb" if entry["time_limit_bootstrap"] else ""
        entry["vs_rlgames_mixed"] = ratio(median[entry["id"]], median.get("rlgames-mixed"))
        entry["vs_rlgames_fp32"] = ratio(median[entry["id"]], median.get("rlgames-fp32"))
        entry["vs_floor"] = ratio(median[entry["id"]], median.get(f"floor-{entry['precision']}"))
        entry["vs_bare_ppo"] = ratio(median[entry["id"]], median.get(f"bare-ppo-{entry['precision']}"))
        entry["of_ceiling"] = ratio(entry["tflops"], ceiling.get(entry["precision"]))
        is_sfp = entry["framework"] == "omni" and entry["single_forward_pass"]
        double = median.get(f"omni-double-{entry['precision']}{tlb}")
        entry["sfp_speedup"] = ratio(double, median[entry["id"]]) if is_sfp else None
    return entries


def targets(entries: list[dict[str, Any]], work: Work) -> list[dict[str, Any]]:
    """Issues 7 and 14's targets as measured ratios of medians (only those whose rows ran); where issue 14
    tightened a target of issue 7, issue 14's. Run-time ratios, except the rollout SPS one (issue 14, set for
    the small network on Cartpole), a ratio of rollout rates."""
    median = {e["id"]: e["run_s"]["median"] for e in entries}
    fp32_limit = 0.80 if tuple(work.units) == FP32_TARGET_SMALL_NETWORK else 0.95
    wanted = [
        ("omni-sfp vs rl_games, mixed precision (issue 14)", "omni-sfp-mixed", "rlgames-mixed", "<=", 0.36),
        ("omni-sfp vs rl_games, fp32 (issue 7)", "omni-sfp-fp32", "rlgames-fp32", "<=", fp32_limit),
    ]
    for p in ("fp32", "mixed"):
        wanted += [
            (f"omni-sfp vs skrl built-in SFP, {p} (issue 7)", f"omni-sfp-{p}", f"skrl-sfp-{p}", "<=", 1.00),
            (
                f"omni-sfp vs skrl built-in SFP, {p}, bootstrap on (issue 7)",
                f"omni-sfp-{p}-tlb",
                f"skrl-sfp-{p}-tlb",
                "<=",
                0.92,
            ),
        ]
    for p, limit in (("fp32", 1.92), ("mixed", 1.80)):
        wanted.append(
            (f"SFP speedup over double pass, {p} (issue 14)", f"omni-double-{p}", f"omni-sfp-{p}", ">=", limit)
        )
    for p, limit in (("fp32", 1.02), ("mixed", 1.03)):
        wanted.append((f"omni-sfp vs compute floor, {p} (issue 14)", f"omni-sfp-{p}", f"floor-{p}", "<=", limit))
    # the captured step, GPU-sized presets (reference: big network; isaaclab: Humanoid's sizes)
    for p, limit in (("fp32", 1.9), ("mixed", 1.5)):
        wanted.append(
            (
                f"SFP speedup over double pass, both captured, {p}",
                f"omni-double-{p}-captured",
                f"omni-sfp-{p}-captured",
                ">=",
                limit,
            )
        )
        wanted.append((f"omni-sfp captured vs rl_games, {p}", f"omni-sfp-{p}-captured", f"rlgames-{p}", "<=", 0.5))
    wanted.append(("omni-sfp captured vs compute floor, mixed", "omni-sfp-mixed-captured", "floor-mixed", "<=", 1.5))
    found = [
        _target(name, f"{numerator} / {denominator}", ratio(median.get(numerator), median.get(denominator)), op, limit)
        for name, numerator, denominator, op, limit in wanted
    ]
    sps = {e["id"]: e["rollout_sps"]["median"] for e in entries if "rollout_sps" in e}
    if work.task == "Cartpole":
        found.append(
            _target(
                "rollout SPS, omni-sfp vs rl_games, fp32 (issue 14)",
                "rollout SPS omni-sfp-fp32 / rlgames-fp32",
                ratio(sps.get("omni-sfp-fp32"), sps.get("rlgames-fp32")),
                ">=",
                1.20,
            )
        )
    return [target for target in found if target is not None]


def compile_payback(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per compiled or captured row with its eager twin in the table: what compiling costs once (the difference of their
    first updates, which include building and first calls) and saves per update, and after how many updates
    it has paid back (the number ``omni_sfp.compute.compile_policy`` decides with)."""
    by_id = {e["id"]: e for e in entries}
    found = []
    for entry in entries:
        suffix = next((s for s in ("-compiled", "-captured") if entry["id"].endswith(s)), None)
        eager = by_id.get(entry["id"].removesuffix(suffix)) if suffix else None
        if eager is None or "first_update_s" not in entry:
            continue
        compile_s = entry["first_update_s"]["median"] - eager["first_update_s"]["median"]
        saved_s = eager["update_s"]["median"] - entry["update_s"]["median"]
        found.append(
            {
                "row": entry["id"],
                "compile_s": compile_s,
                "saved_per_update_s": saved_s,
                "saving": saved_s / eager["update_s"]["median"],
                "payback_updates": compile_s / saved_s if saved_s > 0 else None,
            }
        )
    return found


def _target(name: str, what: str, value: float | None, op: str, limit: float) -> dict[str, Any] | None:
    if value is None:
        return None
    met = value <= limit if op == "<=" else value >= limit
    return {"name": name, "ratio": what, "value": value, "target": f"{op} {limit:.2f}x", "met": met}


def _x(value: float | None, base_id: str, row_id: str) -> str:
    if row_id == base_id:
        return "1 (base)"
    return "" if value is None else f"{value:.3f}x"


def kernels_note(infos: list[dict[str, Any]]) -> str:
    """The CPU choices a row ran with (omni_sfp.compute.cpu_choices), e.g. ``ELU torch/fast, keep_freed, fused Adam, 2
    threads`` (ELU without / with autograd); ``varied`` where its repetitions differed; empty where none apply."""
    seen = {json.dumps(info["kernels"]["choices"], sort_keys=True) for info in infos if "kernels" in info}
    if not seen:
        return ""
    if len(seen) > 1:
        return "varied: " + "; ".join(kernels_text(json.loads(choices)) for choices in sorted(seen))
    return kernels_text(json.loads(seen.pop()))


def kernels_text(choices: dict[str, Any]) -> str:
    adam = "fused Adam" if choices["fused_adam"] else "Adam loop"
    return (
        f"ELU {choices['elu_no_grad']}/{choices['elu_autograd']}, {choices['allocator']}, {adam}, "
        f"{choices['threads']} thread{'s' if choices['threads'] != 1 else ''}"
    )


def _notes(entry: dict[str, Any]) -> str:
    notes = [] if entry["effective_precision"] in ("fp32", "bf16 autocast") else [entry["effective_precision"]]
    hits = [info["sfp_hit_rate"] for info in entry["info"] if "sfp_hit_rate" in info]
    if hits:
        notes.append(f"cache hits {100 * min(hits):.0f}%")
    if any(info.get("fused_adam") for info in entry["info"]):
        notes.append("fused Adam")
    if any(info.get("torch_compile") for info in entry["info"]):
        notes.append("torch.compile")
    captured = {info["capture"] for info in entry["info"] if info.get("capture", "off") != "off"}
    if captured:
        notes.append(f"captured step ({', '.join(sorted(captured))})")
    return "; ".join(notes)


def markdown(report: dict[str, Any]) -> str:
    """The table (the reference table's columns plus issue 7's), the targets, the work and what differs."""
    meta, work = report["meta"], report["work"]
    lines = [
        f"# omni-sfp benchmark: {report['preset']} preset, {meta['date']}",
        "",
        f"- machine: {meta['cpu']}, {meta['cores']} cores, device {meta['device']}, torch threads {meta['threads']}, "
        f"load average {meta['load_before']:.2f} before / {meta['load_after']:.2f} after",
        f"- CPU flags that decide the kernels: {' '.join(meta.get('cpu_flags') or []) or 'none of ' + ', '.join(SIMD_FLAGS)}",
        f"- versions: python {meta['python']}, torch {meta['torch']}, skrl {meta['skrl']}, rl_games {meta['rl_games']}",
        f"- command: `{meta['command']}`",
        f"- env: {meta['env']}",
        f"- work per run: network {list(work['units'])}, {work.get('observation_size', 60)} observations, "
        f"{work.get('action_size', 8)} actions, {work['num_envs']} envs, horizon {work['horizon']}, "
        f"{work['updates']} timed PPO updates (+{work['warmup_updates']} warm-up) = "
        f"{work['updates'] * work['num_envs'] * work['horizon']} env steps, {work['epochs']} mini-epochs x "
        f"{work['num_envs'] * work['horizon'] // work['minibatch_size']} minibatches of {work['minibatch_size']}, "
        f"fixed learning rate {work['learning_rate']}, input and value normalisation on",
        f"- timing: {report['repetitions']} interleaved repetition{'s' if report['repetitions'] != 1 else ''}, "
        "each run in a fresh process; medians [min-max]",
        "",
        "| configuration | precision | s/run | s/update | rollout SPS | learning s/update | vs rl_games mixed | "
        "vs rl_games fp32 | vs floor | TFLOP/s | of ceiling | SFP speedup | kernels | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in report["rows"]:
        run, upd = e["run_s"], e["update_s"]
        speedup = "" if e["sfp_speedup"] is None else f"{e['sfp_speedup']:.2f}x"
        vs_floor = "" if e["framework"] == "floor" or e["vs_floor"] is None else f"{e['vs_floor']:.3f}x"
        tflops = "" if e.get("tflops") is None else f"{e['tflops']:.3f}" if e["tflops"] >= 0.001 else "<0.001"
        sps = "" if "rollout_sps" not in e else f"{e['rollout_sps']['median']:.0f}"
        learning = "" if "learning_s" not in e else f"{e['learning_s']['median']:.3f}"
        of_ceiling = "" if e.get("of_ceiling") is None else f"{100 * e['of_ceiling']:.1f}%"
        lines.append(
            f"| {e['label']} | {e['precision']} | {run['median']:.2f} [{run['min']:.2f}-{run['max']:.2f}] | "
            f"{upd['median']:.3f} [{upd['min']:.3f}-{upd['max']:.3f}] | {sps} | {learning} | "
            f"{_x(e['vs_rlgames_mixed'], 'rlgames-mixed', e['id'])} | "
            f"{_x(e['vs_rlgames_fp32'], 'rlgames-fp32', e['id'])} | "
            f"{vs_floor} | {tflops} | {of_ceiling} | {speedup} | {kernels_note(e['info'])} | {_notes(e)} |"
        )
    if report["targets"]:
        lines += [
            "",
            "Targets (ratios of medians; set for the big network on the cpu preset, the rollout SPS one for "
            "the cartpole preset):",
            "",
            "| target | ratio | measured | target | met |",
            "|---|---|---|---|---|",
        ]
        for t in report["targets"]:
            lines.append(
                f"| {t['name']} | {t['ratio']} | {t['value']:.3f}x | {t['target']} | {'yes' if t['met'] else 'no'} |"
            )
    overhead = [e for e in report["rows"] if e["framework"] in FRAMEWORKS and e.get("vs_bare_ppo") is not None]
    if overhead:
        lines += [
            "",
            "Framework overhead: each framework row's run time over bare-torch PPO's at the same precision "
            "(the same learning with no framework; its own ratio to the floor is what PPO costs beyond the network):",
            "",
        ]
        lines += [f"- {e['label']}: {e['vs_bare_ppo']:.3f}x" for e in overhead]
    cpu = {e["id"]: e["cpu_update_s"]["median"] for e in report["rows"] if "cpu_update_s" in e}
    if cpu and meta["device"] == "cpu":
        lines += [
            "",
            "CPU seconds per update (the process's CPU time in the timed window, medians; with one thread a "
            "steadier measure than wall time on a machine shared with other work):",
            "",
        ]
        for e in report["rows"]:
            if e["id"] in cpu:
                bare = cpu.get(f"bare-ppo-{e['precision']}")
                versus = f" ({cpu[e['id']] / bare:.3f}x bare-torch PPO)" if bare and e["framework"] != "bare" else ""
                lines.append(f"- {e['label']}: {cpu[e['id']]:.3f} s{versus}")
    payback = compile_payback(report["rows"])
    if payback:
        lines += [
            "",
            "torch.compile (the trunk, or the captured step) against the same row eager (medians):",
            "",
            "| row | compile cost | saved per update | pays back after |",
            "|---|---|---|---|",
        ]
        for p in payback:
            after = "never" if p["payback_updates"] is None else f"{p['payback_updates']:.0f} updates"
            lines.append(
                f"| {p['row']} | {p['compile_s']:.1f} s | {p['saved_per_update_s']:.3f} s "
                f"({100 * p['saving']:.1f}%) | {after} |"
            )
    frameworks = {e["framework"] for e in report["rows"]}
    lines += ["", "Work that cannot be aligned:", ""]
    for framework, items in UNALIGNED.items():
        if framework in frameworks:
            lines += [f"- {framework}: {item}" for item in items]
    return "\n".join(lines) + "\n"


def save(report: dict[str, Any], stem: Path) -> list[Path]:
    """Write ``<stem>.json``, ``<stem>.md`` and ``<stem>.png``; returns their paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".json"), stem.with_suffix(".md"), stem.with_suffix(".png")]
    paths[0].write_text(json.dumps(report, indent=2))
    paths[1].write_text(markdown(report))
    chart(report, paths[2])
    return paths


COLORS = {
    "rlgames": "tab:blue",
    "omni": "tab:green",
    "skrl": "tab:orange",
    "bare": "tab:brown",
    "floor": "tab:gray",
    "ceiling": "tab:purple",
}


def chart(report: dict[str, Any], path: Path) -> None:
    """Median seconds per PPO update per row, min-max whiskers, the floors as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(rows) + 1.6))
    medians = [e["update_s"]["median"] for e in rows]
    errors = [
        [m - e["update_s"]["min"] for m, e in zip(medians, rows)],
        [e["update_s"]["max"] - m for m, e in zip(medians, rows)],
    ]
    positions = range(len(rows))
    bars = ax.barh(positions, medians, xerr=errors, color=[COLORS[e["framework"]] for e in rows], capsize=3)
    for bar, e in zip(bars, rows):
        if e["precision"] == "mixed":
            bar.set_hatch("//")
    for e in rows:
        if e["framework"] == "floor":
            ax.axvline(
                e["update_s"]["median"],
                color="k",
                linestyle="--" if e["precision"] == "fp32" else ":",
                linewidth=0.8,
                label=f"compute floor, {e['precision']}",
            )
    ax.set_yticks(list(positions), [e["label"] for e in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per PPO update (median of interleaved runs, min-max)")
    meta = report["meta"]
    ax.set_title(
        f"{report['preset']} preset, network {list(report['work']['units'])}, {meta['cpu']}, "
        f"{meta['threads']} threads, {meta['date']}",
        fontsize=8,
    )
    if any(e["framework"] == "floor" for e in rows):
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
