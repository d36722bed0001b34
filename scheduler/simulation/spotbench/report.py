"""The spot benchmark's result as Markdown, a chart and JSON."""

from __future__ import annotations

import io
from pathlib import Path

from scheduler.simulation.spotbench.bench import ALL, GROUPS, POLICY_ORDER, BenchResult, GroupResult
from scheduler.simulation.spotbench.traces import FETCH_HINT

CHART_NAME = "spot-bench.png"
_COLOURS = {
    "od-only": "#8d99ae",
    "greedy": "#e9c46a",
    "uniform-progress": "#f4a261",
    "gpusched": "#2a9d8f",
    "optimal": "#264653",
}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def render_markdown(result: BenchResult) -> str:
    c = result.config
    t = result.targets
    lines = [
        "# Spot under deadlines: trace replay",
        "",
        (
            f"{len(result.traces)} traces x {c.starts} start points (seed {c.seed}) x C0/R0 in "
            f"{', '.join(f'{r:g}' for r in c.ratios)} x d in {', '.join(f'{d:g} h' for d in c.changeovers_h)}; "
            f"C0 = {c.compute_h:g} h; {len(POLICY_ORDER)} policies; {result.elapsed_s:.0f} s."
        ),
        (
            "Cost is relative to on-demand only (lower is better); the gap is to the omniscient optimum, "
            "in the same unit."
        ),
        "",
        "## Targets",
        "",
        f"- gpusched deadline misses: **{t.misses}** (target 0) - {'met' if t.no_misses else 'MISSED'}",
        (
            f"- gpusched mean cost minus Uniform Progress's, worst group: **{t.worst_margin_vs_up:+.4f}** "
            f"(target <= 0) - {'met' if t.at_most_up_everywhere else 'MISSED'}"
        ),
        (
            f"- share of UP's gap to the optimum that gpusched closes, all windows: **{_pct(t.gap_closed)}** "
            f"(target >= 50%) - {'met' if t.half_gap_closed else 'MISSED'}"
        ),
        "",
        "## By group",
        "",
        "| group | policy | mean cost | p75 cost | gap to optimal | misses |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for g in result.groups:
        for s in g.policies:
            lines.append(
                f"| {g.name} ({g.traces} traces, {g.windows} windows) | {s.policy} | {s.mean_cost:.3f} | "
                f"{s.p75_cost:.3f} | {s.gap_to_optimal:.3f} | {s.misses} |"
            )
    lines += ["", "| group | gap UP -> optimal closed by gpusched |", "|---|---:|"]
    lines += [f"| {g.name} | {_pct(g.gap_closed)} |" for g in result.groups]
    if result.sanity is not None:
        s = result.sanity
        lines += [
            "",
            "## Sanity run: the paper's Table 3 setting",
            "",
            (
                f"C0 = {s.compute_h:g} h, d = {s.changeover_h:g} h, C0/R0 = {s.ratio:g}, first {s.days:g} days of "
                f"{len(s.traces)} traces ({s.windows} windows). Compute hours, changeovers excluded."
            ),
            "",
            "| policy | on-demand h | spot h | spot use vs optimum | paper |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {r.policy} | {r.od_work_h:.1f} | {r.spot_work_h:.1f} | {r.spot_use:.0%} | {_pct(r.paper_spot_use)} |"
            for r in s.rows
        ]
    lines += [
        "",
        "## By trace",
        "",
        "| trace | N | availability | tick | d ticks | k | " + " | ".join(POLICY_ORDER) + " |",
        "|---|---:|---:|---:|---|---:|" + "---:|" * len(POLICY_ORDER),
    ]
    for tr in result.traces:
        costs = " | ".join(f"{tr.mean_cost.get(p, float('nan')):.3f}" for p in POLICY_ORDER)
        lines.append(
            f"| {tr.name} | {tr.nodes} | {tr.availability:.0%} | {tr.tick_s:.0f} s | "
            f"{','.join(map(str, tr.changeover_ticks))} | {tr.k:.2f} | {costs} |"
        )
    lines += [
        "",
        f"![cost relative to on-demand]({CHART_NAME})",
        "",
        "## Notes",
        "",
        (
            f"- Ticks of at most {c.max_tick_s:g} s: coarser traces are split, finer ones merged (a merged tick "
            "has spot only if every sample in it had); d is rounded to whole ticks (the d ticks column), so "
            "the optimum is an exact dynamic program in the same model every policy runs in."
        ),
        (
            "- Entering an instance costs d of no progress at its price; OD is always there; a reclaimed job "
            "keeps its progress (checkpointed). An N-node trace has spot only when at least N instances are "
            "available; the gang moves together. Availability groups use that share over the whole trace."
        ),
        (
            "- k: the p3.2xlarge on-demand price ($3.06/h) over the trace's mean spot price, or over $0.918/h "
            "(the price the preemption traces recorded) where the trace has none."
        ),
        (
            "- gpusched's few constants (scheduler/planner/spot_rule.py) were chosen by measurement on these same "
            "traces: the figures above are in-sample."
        ),
        f"- Traces: not in this repository; {FETCH_HINT}.",
        "",
    ]
    return "\n".join(lines)


def render_chart(result: BenchResult) -> bytes:
    """PNG: mean cost relative to on-demand per policy, one cluster per group (p75 as a tick)."""
    # Figure + Agg canvas, not pyplot: no global state; imported late to keep the CLI quick.
    from matplotlib.figure import Figure

    groups: list[GroupResult] = [result.group(name) for name in (*GROUPS, ALL) if _has(result, name)]
    policies = [p for p in POLICY_ORDER if groups and any(s.policy == p for s in groups[0].policies)]
    fig = Figure(figsize=(9, 4))
    ax = fig.add_subplot()
    width = 0.8 / max(len(policies), 1)
    for j, policy in enumerate(policies):
        xs = [i + (j - (len(policies) - 1) / 2) * width for i in range(len(groups))]
        stats = [g.stats(policy) for g in groups]
        ax.bar(xs, [s.mean_cost for s in stats], width, label=policy, color=_COLOURS.get(policy))
        ax.scatter(xs, [s.p75_cost for s in stats], marker="_", color="black", s=60, zorder=3)
    ax.set_xticks(range(len(groups)), [g.name.replace(", ", "\n") for g in groups], fontsize="small")
    ax.set_ylabel("cost / on-demand-only cost")
    ax.set_ylim(0, 1.15)
    ax.set_title("Mean cost per policy (bar) and 75th percentile (tick), by trace group")
    ax.legend(fontsize="small", ncols=len(policies), loc="upper center", bbox_to_anchor=(0.5, -0.16))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    return buf.getvalue()


def _has(result: BenchResult, name: str) -> bool:
    return any(g.name == name for g in result.groups)


def write_chart(result: BenchResult, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render_chart(result))
    return path


def write_outputs(result: BenchResult, out_dir: Path) -> list[Path]:
    """``spot-bench.md``, ``spot-bench.png`` and ``spot-bench.json`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown, data = out_dir / "spot-bench.md", out_dir / "spot-bench.json"
    markdown.write_text(render_markdown(result), encoding="utf-8")
    data.write_text(result.model_dump_json(indent=2), encoding="utf-8")
    return [markdown, write_chart(result, out_dir / CHART_NAME), data]
