"""``gpusched simulate``, ``trace generate|export`` and ``bench spot-traces``: the what-if commands.

They run the daemon's tick over a trace on the sandbox clouds (or replay real spot traces), read no
cloud and need no daemon. Added to the root command by ``register`` (``cli.py``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

from scheduler.app import cli_progress
from scheduler.errors import UserError
from scheduler.settings import WHAT_IF_SETTINGS
from scheduler.simulation.spotbench import MAX_STARTS

if TYPE_CHECKING:  # the CLI imports the simulator only when a command needs it
    from scheduler.settings import Settings
    from scheduler.simulation.simulate import Progress as SimRunProgress

__all__ = ["register"]


def register(app: typer.Typer, settings: Callable[[], Settings], out: Console, err: Console,
             writable_folder: Callable[[Path, str], None]) -> None:
    """Add ``simulate``, ``trace`` and ``bench`` to ``app``."""
    _writable_folder, _settings = writable_folder, settings

    bench_app = typer.Typer(help="Benchmarks on data the project did not make.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")

    @bench_app.command("spot-traces")
    def bench_spot_traces(
        traces: Path = typer.Option(..., help="folder of the Can't Be Late spot traces (skypilot-org/spot-traces)"),
        out_dir: Path = typer.Option(Path("spot-bench"), "--out", help="where the table, chart and JSON go"),
        # BenchConfig's bounds, told by their options (0 was an internal ValidationError)
        starts: int = typer.Option(300, min=1, max=MAX_STARTS, help="start points per trace"),
        seed: int = typer.Option(0, help="seed for the start points"),
        workers: int = typer.Option(0, min=0, help="processes (0: one per core, at most 4)"),
    ) -> None:
        """Replay real AWS spot traces: od-only, greedy, Uniform Progress, ours and the optimum."""
        from scheduler.simulation.spotbench.bench import run_spot_bench
        from scheduler.simulation.spotbench.report import render_markdown, write_outputs

        result = run_spot_bench(traces, starts=starts, seed=seed, workers=workers)
        _writable_folder(out_dir, "--out")
        write_outputs(result, out_dir)
        sys.stdout.write(render_markdown(result) + "\n")
        out.print(f"written to {out_dir}/")

    trace_app = typer.Typer(help="Workload traces for `gpusched simulate`.", no_args_is_help=True)
    app.add_typer(trace_app, name="trace")

    @trace_app.command("generate")
    def trace_generate(
        out_file: Path = typer.Option(..., "--out", help="where to write the trace (.jsonl, or .jsonl.gz)"),
        seed: int = typer.Option(1, help="seed (same seed, same trace)"),
        month: str = typer.Option("2026-11", help="the month, e.g. 2026-11"),
        teams: int = typer.Option(3, help="how many teams"),
        jobs: Optional[int] = typer.Option(None, help="about this many jobs (default: a realistic month)"),
        family: str = typer.Option("standard", help="kind of month: standard (the one the planner was tuned on), "
                                   "long-training, tight-deadlines, heavy-inference, mixed"),
        reclaim_scale: Optional[str] = typer.Option(None, help='the market: factors on the catalog\'s spot reclaim '
                                                    "rates, \"2\" or \"aws=2,alibaba/cn-hangzhou=0.5\" (written into "
                                                    "the trace; simulate uses them)"),
        progress: Optional[bool] = cli_progress.progress_option(),
    ) -> None:
        """Generate a month of realistic YOLOv9 work: weekly retrains, experiments, nightly inference, exports."""
        from scheduler.simulation.traces import main as generate

        argv = ["--seed", str(seed), "--month", month, "--teams", str(teams), "--out", str(out_file),
                "--family", family]
        if jobs is not None:
            argv += ["--jobs", str(jobs)]
        if reclaim_scale is not None:
            argv += ["--reclaim-scale", reclaim_scale]
        with cli_progress.Bar(err, f"trace {month}: team streams", 3 * teams,
                              enabled=cli_progress.wanted(progress, err)) as bar:
            code = generate(argv, progress=lambda done, total: bar.update(done, total))
        raise typer.Exit(code)

    @trace_app.command("export")
    def trace_export(
        month: str = typer.Option(..., help="the month whose submitted jobs to write, e.g. 2026-11 (UTC)"),
        out_file: Optional[Path] = typer.Option(None, "--out", help="where to write the trace (.jsonl, or .jsonl.gz; "
                                                "default trace-MONTH.jsonl)"),
    ) -> None:
        """Write the store's jobs of a month as a trace, to replay your own month with `gpusched simulate`."""
        from scheduler.simulation.trace_export import export_trace
        from scheduler.simulation.trace_file import dump_trace
        from scheduler.store.database import Store

        settings = _settings()
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        store = Store(settings.db_url)
        store.migrate()
        try:
            entries = export_trace(store, month)
        finally:
            store.dispose()
        path = out_file or Path(f"trace-{month}.jsonl")
        dump_trace(entries, path)
        out.print(f"{len(entries)} job(s) submitted in {month} written to {path}")
        out.print(f"replay them with: gpusched simulate --trace {path}", highlight=False)

    @app.command()
    def simulate(
        trace: Path = typer.Option(..., help="workload trace: JSON lines {at, job} (.jsonl or .jsonl.gz)"),
        policy: str = typer.Option("gpusched", help="gpusched | on-demand | spot-greedy | skypilot-like; several "
                                   "separated by commas, or all: each in its own process, compared in one table"),
        seed: int = typer.Option(1, help="seed for the sandbox clouds (prices, boots, reclaims)"),
        output: Optional[Path] = typer.Option(None, help="write the summary JSON here (several policies: an object "
                                              "keyed by policy)"),
        explain: Optional[Path] = typer.Option(None, help="write every failed, late or unfinished job with its "
                                               "cause here (CSV; several policies: one file each, FILE-POLICY.csv)"),
        gaps: Optional[Path] = typer.Option(None, help="write every job's bill beside its share of the lower bound "
                                            "here (CSV), the largest gap first: on-demand part, reclaims, true speed; "
                                            "several policies: one file each"),
        lower_bound: bool = typer.Option(True, help="also solve the LP lower bound (HiGHS), at the estimated "
                                         "speeds and again at the simulated true speeds"),
        tick_seconds: float = typer.Option(10.0, min=1.0, help="the simulated daemon's tick interval "
                                           "(GPUSCHED_TICK_SECONDS); events closer together share a tick"),
        workers: int = typer.Option(0, min=0, help="processes for several policies (0: one per core, at most 4)"),
        set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE",
                                       help="what if the daemon had this setting (over GPUSCHED_* from the "
                                       f"environment): {', '.join(WHAT_IF_SETTINGS)}; repeat for several. "
                                       "A reservation's fee is amortized over the run: reserved_fees, amortized_cost"),
        progress: Optional[bool] = typer.Option(None, "--progress/--no-progress",
                                                help="a progress bar on stderr [default: when stderr is a terminal]"),
    ) -> None:
        """Run the daemon's tick over a month-long trace on the sandbox clouds; print the summary.

        The summary JSON goes to stdout; the fair score (what the bill bought) and why jobs failed or
        were late go to stderr as a table, after a progress bar while it runs (on a terminal). With
        several policies, one table compares them.
        """
        from scheduler.logs import configure_logging
        from scheduler.simulation.compare import (
            load_month,
            policies_of,
            run_policies,
            run_policy,
            sim_settings,
            solve_bound,
            what_if_of,
        )

        policies = policies_of(policy)
        what_if = what_if_of(set_)
        if output is not None:  # before the month is simulated, not after
            if output.is_dir():
                raise UserError(f"--output {output} is a folder", fix="give --output a file path, e.g. summary.json")
            _writable_folder(output.parent, "the folder of --output")
        if gaps is not None and not lower_bound:
            raise UserError("--gaps compares each job with the lower bound, and --no-lower-bound skips it",
                            fix="drop --no-lower-bound, or drop --gaps")
        for name, path in (("--explain", explain), ("--gaps", gaps)):
            if path is not None:
                if path.is_dir():
                    raise UserError(f"{name} {path} is a folder",
                                    fix=f"give {name} a file path, e.g. {path / 'out.csv'}")
                _writable_folder(path.parent, f"the folder of {name}")
        configure_logging("console", "warning")
        month = load_month(trace)
        if not month.market.is_catalog:
            err.print(f"market: {month.market.describe()}", highlight=False)
        settings = sim_settings(seed, tick_seconds, what_if)  # checked before the month is simulated
        bound = solve_bound(month, settings) if lower_bound else None
        bar_wanted = err.is_terminal if progress is None else progress
        if len(policies) == 1:
            with _SimProgress(err, policies[0], len(month.submissions), enabled=bar_wanted) as bar:
                runs = {policies[0]: run_policy(trace, policies[0], seed, tick_seconds, bound, what_if=what_if,
                                                month=month, progress=bar.update)}
        else:
            with cli_progress.Bar(err, f"simulate {', '.join(policies)}: policies done", len(policies),
                                  enabled=bar_wanted) as bar:
                finished: list[str] = []

                def done(run) -> None:
                    finished.append(run.summary.policy)
                    bar.update(len(finished), status=f"{run.summary.policy} {run.cpu_seconds:,.0f} CPU s")

                runs = run_policies(trace, policies, seed, tick_seconds, bound, what_if=what_if, workers=workers,
                                    done=done)
        summaries = {p: r.summary for p, r in runs.items()}
        text = _summaries_json(summaries)
        if output:
            try:
                output.write_text(text + "\n")
            except OSError as exc:
                raise UserError(f"cannot write --output {output}: {exc.strerror or type(exc).__name__}",
                                fix="give --output a file path in a folder this user can write") from None
        _write_listings(summaries, explain, gaps)
        sys.stdout.write(text + "\n")
        changed = next(iter(summaries.values())).settings
        if changed:
            err.print("settings away from their defaults (--set or GPUSCHED_*): "
                      + ", ".join(f"{k}={v}" for k, v in changed.items()), highlight=False)
        if len(runs) == 1:
            summary = summaries[policies[0]]
            _print_fair_score(summary, err)
            if gaps:
                _print_gaps(summary, gaps, err)
        else:
            _print_comparison(list(runs.values()), err)


def _per_policy(path: Path, policy: str, several: bool) -> Path:
    """``why.csv`` as it is for one policy; ``why-on-demand.csv`` and so on for several."""
    return path.with_name(f"{path.stem}-{policy}{path.suffix}") if several else path


def _write_listings(summaries: dict, explain: Path | None, gaps: Path | None) -> None:
    from scheduler.simulation.fair_score import write_explain_csv
    from scheduler.simulation.gaps import write_gaps_csv

    several = len(summaries) > 1
    for policy, summary in summaries.items():
        if explain:
            write_explain_csv(summary.explained, _per_policy(explain, policy, several))
        if gaps:
            write_gaps_csv(summary.gaps, _per_policy(gaps, policy, several))


def _summaries_json(summaries: dict) -> str:
    """One policy: its summary, as always; several: an object keyed by policy (each summary as one prints)."""
    if len(summaries) == 1:
        return next(iter(summaries.values())).to_json()
    return json.dumps({p: s.model_dump(mode="json") for p, s in summaries.items()}, indent=2, sort_keys=True)


def _print_comparison(runs: list, err: Console) -> None:
    """Several policies on one month on the fair footing (the fair score's figures): a column each, so that
    four fit a narrow terminal. ``runs``: ``compare.PolicyRun``s."""
    summaries = [r.summary for r in runs]
    cpu = {r.summary.policy: r.cpu_seconds for r in runs}
    first = summaries[0]
    table = Table(title=f"{first.jobs} jobs, seed {first.seed}: the policies compared")
    table.add_column(first.currency)
    for s in summaries:
        table.add_column(s.policy, justify="right")

    def ratio(s, bound) -> str:
        return f"{s.total_cost / bound:.3f}x" if bound else "-"

    def split(n: int, unavoidable: int | None) -> str:
        return f"{n} ({unavoidable})" if unavoidable else str(n)

    rows = {
        "total": lambda s: f"{s.total_cost:,}",
        "below on-demand prices": lambda s: (f"{1 - s.total_cost / s.on_demand_equivalent_cost:.1%}"
                                             if s.on_demand_equivalent_cost else "-"),
        "/ lower bound": lambda s: ratio(s, s.lower_bound_cost),
        "/ bound at true speeds": lambda s: ratio(s, s.lower_bound_true_speed_cost),
        "/ on-time floor": lambda s: ratio(s, s.floor_true_speed_cost),
        "deadline misses": lambda s: split(s.deadline_misses, s.fair_score.misses_unavoidable),
        "failed": lambda s: split(s.failed, s.fair_score.failed_unavoidable),
        "GPU-hours on time": lambda s: f"{s.fair_score.completed_gpu_hours:,}",
        "per GPU-hour on time": lambda s: (f"{s.fair_score.cost_per_completed_gpu_hour:.2f}"
                                           if s.fair_score.cost_per_completed_gpu_hour is not None else "-"),
        "on-demand share": lambda s: (f"{s.cost_by_capacity.get('on-demand', 0) / s.total_cost:.0%}"
                                      if s.total_cost else "-"),
        "CPU seconds": lambda s: f"{cpu[s.policy]:,.0f}",
    }
    if any(s.reserved_fees for s in summaries):  # where a reservation was bought: what the span cost with its fee
        rows = {"total": rows.pop("total"), **_fee_rows(), **rows}
    for label, cell in rows.items():
        table.add_row(label, *(cell(s) for s in summaries))
    err.print(table)
    err.print(f"of {first.fair_score.work_gpu_hours:,} GPU-hours of work; misses and failures in brackets: no "
              "schedule could avoid them (judged at true speeds where that bound was solved)", highlight=False)
    if any(s.floor_true_speed_cost for s in summaries):
        err.print("on-time floor: the least a schedule that is always on time pays on average, spot priced through "
                  "its expected reclaims (one draw may pay less)", highlight=False)


class _SimProgress:
    """``gpusched simulate``'s progress bar (rich): jobs submitted out of the trace's, the simulated day
    and ticks; once every job is in, the run goes on until the last ones end. Redrawn at most 4 times a
    second whatever the tick rate, and nothing at all when disabled."""

    def __init__(self, console: Console, policy: str, jobs: int, *, enabled: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                             console=console, disable=not enabled, refresh_per_second=4, transient=False)
        self._task = self._bar.add_task(f"simulate {policy}: jobs submitted", total=jobs, status="")
        self._start: datetime | None = None

    def __enter__(self) -> _SimProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def update(self, p: SimRunProgress) -> None:
        if self._start is None:
            self._start = p.now
        day = (p.now - self._start).total_seconds() / 86400
        waiting = "" if p.submitted < p.jobs else ", finishing the last jobs"
        self._bar.update(self._task, completed=p.submitted,
                         status=f"day {day:.1f}, {p.ticks:,} ticks{waiting}")


def _print_gaps(summary, path: Path, err: Console, top: int = 3) -> None:
    """Where the jobs' gaps over their bound shares are, and the few largest, after the table (the CSV has all)."""
    from scheduler.simulation.gaps import SLOW, totals

    over = [g for g in summary.gaps if g.gap is not None and g.gap > 0]
    err.print(f"{len(summary.gaps)} job(s) beside their share of the lower bound in {path}", highlight=False)
    if over:
        t = totals(summary.gaps)
        err.print(f"jobs over their share: {t.over_share:,.2f} {summary.currency} in all: {t.reclaimed:,.2f} on jobs "
                  f"reclaimed at least once, {t.slow:,.2f} on jobs that ran over {SLOW}x slower than estimated, "
                  f"{t.on_demand:,.2f} on jobs billed mostly on-demand (a job may be in several); the largest:",
                  highlight=False)
        if t.over_true_speed_share is not None:
            err.print(f"over their share of the bound at true speeds: {t.over_true_speed_share:,.2f} "
                      f"{summary.currency} (column true_speed_gap)", highlight=False)
    for g in over[:top]:
        speed = f", true speed {g.true_speed}" if g.true_speed else ""
        err.print(f"  {g.name}: {g.cost:,.2f} against {g.bound_cost:,.2f} ({g.bound_setup}); on-demand "
                  f"{g.on_demand_cost:,.2f}, {g.preemptions} reclaim(s){speed}", highlight=False)


def _fee_rows() -> dict:
    return {"reserved fees (amortized)": lambda s: f"{s.reserved_fees:,}",
            "total with the fees": lambda s: f"{s.amortized_cost:,}"}


def _bound_rows(summary) -> list[tuple[str, str]]:
    """The lower bound at the estimates and at the jobs' simulated true speeds, and the on-time floor at those
    speeds, each with the bill over it."""
    rows = []
    for label, bound in (("lower bound (estimated speeds)", summary.lower_bound_cost),
                         ("lower bound (true speeds)", summary.lower_bound_true_speed_cost),
                         ("on-time floor (true speeds, on average)", summary.floor_true_speed_cost)):
        if bound is not None:
            ratio = f" (bill {summary.total_cost / bound:.3f}x)" if bound > 0 else ""
            rows.append((label, f"{bound:,}{ratio}"))
    return rows


def _print_fair_score(summary, err: Console) -> None:
    """The fair score as a two-column table (it fits a narrow terminal), then the causes of failures."""
    from scheduler.simulation.outcomes import REASONS

    f, cur = summary.fair_score, summary.currency

    def split(n: int, unavoidable: int | None) -> str:
        return f"{n} ({unavoidable} no schedule can avoid)" if unavoidable is not None else str(n)

    table = Table(title=f"{summary.policy}: what the bill bought")
    table.add_column("")
    table.add_column(cur, justify="right")
    rows = [
        ("total", f"{summary.total_cost:,}"),
        *((label, cell(summary)) for label, cell in _fee_rows().items() if summary.reserved_fees),
        ("work done on time", f"{f.cost_completed_on_time:,}"),
        ("work failed, late or unfinished", f"{f.cost_failed_or_late:,}"),
        ("idle machines", f"{f.cost_idle:,}"),
        ("per GPU-hour done on time", f"{f.cost_per_completed_gpu_hour:.2f}"
         if f.cost_per_completed_gpu_hour is not None else "-"),
        ("GPU-hours done on time", f"{f.completed_gpu_hours:,} of {f.work_gpu_hours:,}"),
        *_bound_rows(summary),
        ("deadline misses", split(summary.deadline_misses, f.misses_unavoidable)),
        ("failed", split(summary.failed, f.failed_unavoidable)),
    ]
    for label, value in rows:
        table.add_row(label, value)
    err.print(table)
    for reason, n in f.why_failed_or_late.items():
        err.print(f"  {n:>5}  {reason}: {REASONS[reason]}", highlight=False)
