"""`gpusched status JOB` as a person reads it (one screen), and `gpusched logs JOB [-f] [--attempt N]`.

``status JOB --json`` prints the daemon's answer as it came; this summary picks what a person checks on
a job: its state and why, where it runs, how far it got, what it has cost, what the planner chose and
why, and its last few events. ``logs`` prints the job's output as its machine's agent shipped it
(``lifecycle/job_logs.py``); ``-f`` follows it, onto the next attempt when a machine is lost, until the
job ends.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from scheduler.app.cli_text import shown
from scheduler.clock import Clock, SystemClock
from scheduler.states import JOB_TERMINAL

if TYPE_CHECKING:  # the command line starts without the store's and the API's modules (shell completion)
    from scheduler.app.client import ApiClient
    from scheduler.lifecycle.job_logs import JobLogs
    from scheduler.lifecycle.service import AttemptView, JobDetail

RECENT_EVENTS = 5
LONG_TEXT = 400  # a reason or a finish message longer than this is cut in the summary (--json has it whole)
FOLLOW_SECONDS = 2.0  # how often `logs -f` asks for more
_LIVE_ATTEMPT = ("launching", "running")
_clock: Clock = SystemClock()  # `logs -f` waits on it (tests replace it)


def _when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M} UTC" if at is not None else "-"


def _cut(text: str, limit: int = LONG_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = min(width, round(width * done / total)) if total else 0
    return "━" * filled + "╌" * (width - filled)


def _where(a: AttemptView) -> str:
    gpus = f", {a.gpu_count}x {a.gpu}" if a.gpu else ""
    return f"{a.provider} / {a.region} ({a.zone}) / {a.instance_type}, {a.capacity}{gpus}"


def _money(value: Any) -> str:
    from scheduler.money import Money

    try:
        return str(Money.model_validate(value))
    except ValueError:
        return "-"


def _plan_lines(plan: dict[str, Any]) -> list[str]:
    """The planner's last decision: what it chose (or that it waits / refused) and why."""
    action = str(plan.get("action") or "?")
    choice = plan.get("choice") if isinstance(plan.get("choice"), dict) else None
    lines = []
    if choice:
        hours = choice.get("est_hours")
        lines.append(f"{action}: {choice.get('gpu_count')}x {choice.get('gpu')} on {choice.get('provider')} / "
                     f"{choice.get('zone')} / {choice.get('instance_type')}, {choice.get('capacity')}"
                     + (f", est. {hours:.1f} h" if isinstance(hours, (int, float)) else "")
                     + f", {_money(choice.get('est_cost'))}")
    else:
        lines.append(action)
    why = plan.get("reason") or (choice or {}).get("why")  # the decision's sentence; the option's tag else
    if why:
        lines.append(f"why: {_cut(str(why))}")
    return lines


def job_summary(d: JobDetail) -> RenderableType:
    """One job on one screen (``status JOB``); every text from the store or a machine shown literally."""
    head = f"[bold]{shown(d.id)}[/bold]  {shown(d.name)}: {d.kind.value} {shown(d.model)}, team {shown(d.team)}"
    if d.project:
        head += f" / {shown(d.project)}"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    state = d.state.value
    if d.attempt:
        state += f" (attempt {d.attempt}" + (f", {d.preemptions} machine(s) lost" if d.preemptions else "") + ")"
    if d.finished_at is not None:
        state += f", ended {_when(d.finished_at)}"
    grid.add_row("state", state)
    if d.reason:
        grid.add_row("why", shown(_cut(d.reason)))
    current = d.attempts[-1] if d.attempts else None
    if current is not None:
        live = current.state in _LIVE_ATTEMPT and d.state not in JOB_TERMINAL
        since = f", since {_when(current.started_at)}" if live and current.started_at else ""
        grid.add_row("runs on" if live else "ran on", shown(_where(current)) + since)
    if d.epochs_total:
        unit = "shards" if d.kind.value == "infer" else "epochs"
        pct = 100 * d.epochs_done / d.epochs_total
        grid.add_row("progress", f"{_bar(d.epochs_done, d.epochs_total)} {d.epochs_done}/{d.epochs_total} {unit} "
                                 f"({pct:.0f}%)")
    cost = f"{d.cost} so far" if d.cost is not None else "nothing yet (no machine has run it)"
    if current is not None and current.est_cost is not None:
        cost += f"; attempt {current.number} estimated at {current.est_cost}"
    if d.budget is not None:
        cost += f"; budget {d.budget}"
    grid.add_row("cost", cost)
    if d.deadline_at is not None:
        grid.add_row("deadline", _when(d.deadline_at))
    if d.plan:
        for i, line in enumerate(_plan_lines(d.plan)):
            grid.add_row("plan" if i == 0 else "", shown(line))
    if d.outputs:
        grid.add_row("outputs", shown(d.outputs))
    recent = d.events[-RECENT_EVENTS:]
    events = Table.grid(padding=(0, 2))
    events.add_column(no_wrap=True, style="dim", min_width=11)
    events.add_column(no_wrap=True, min_width=max((len(e.kind) for e in recent), default=0))
    events.add_column(no_wrap=True, overflow="ellipsis")
    for e in recent:
        events.add_row(f"{e.at:%m-%d %H:%M}", shown(e.kind), shown(_cut(e.message, 200)))
    parts: list[RenderableType] = [Text.from_markup(head), grid]
    if d.events:
        parts += [Text.from_markup(f"[bold]last {min(RECENT_EVENTS, len(d.events))} events[/bold] (UTC)"), events]
    parts.append(Text.from_markup(f"[dim]all of it: gpusched status {shown(d.id)} --json; its output: "
                                  f"gpusched logs {shown(d.id)}[/dim]"))
    return Group(*parts)


# --- logs -----------------------------------------------------------------------------------------


def _kept(limit: int) -> str:
    return f"{limit // (1 << 20)} MiB" if limit % (1 << 20) == 0 else f"{limit:,} bytes"


class _Printer:
    """Writes pages of output to stdout, with a marker where the daemon no longer keeps what came before."""

    def __init__(self, write: Callable[[str], object]) -> None:
        self.write = write

    def page(self, page: JobLogs) -> None:
        if page.dropped:
            self.write(f"[gpusched: {page.dropped:,} bytes of earlier output are not kept; the daemon keeps "
                       f"the last {_kept(page.limit_bytes)} of each attempt]\n")
        if page.text:
            self.write(page.text)


def show_logs(client: ApiClient, job_id: str, *, attempt: int | None, follow: bool, err: Console,
              write: Callable[[str], object] | None = None, clock: Clock | None = None) -> None:
    """Print the attempt's output (``attempt`` None: the latest); ``follow``: keep printing what comes,
    and go on to the next attempt (without ``attempt``) until the job ends."""
    write = write or _stdout
    clock = clock or _clock
    printer = _Printer(write)
    page = client.logs(job_id, attempt=attempt)
    if page.attempt is None:
        if not follow or page.state in JOB_TERMINAL:
            err.print(f"job {shown(job_id)} has no output: it never ran ({page.state.value})", highlight=False)
            return
        err.print(f"[dim]job {shown(job_id)} is {page.state.value}; waiting for it to start…[/dim]", highlight=False)
        while page.attempt is None and page.state not in JOB_TERMINAL:
            clock.sleep(FOLLOW_SECONDS)
            page = client.logs(job_id)
        if page.attempt is None:
            return
    current = page.attempt
    if not follow and len(page.attempts) > 1 and attempt is None:
        err.print(f"[dim]attempt {current} of {len(page.attempts)}; earlier ones: --attempt N[/dim]",
                  highlight=False)
    while True:
        printer.page(page)
        if page.next_offset < page.end:  # more than one answer's worth: ask straight away
            page = client.logs(job_id, attempt=current, offset=page.next_offset)
            continue
        if not follow or (page.done and (attempt is not None or page.state in JOB_TERMINAL)):
            return
        if page.done:  # the machine was lost and the job goes on: the next attempt, once there is one
            latest = client.logs(job_id)
            if latest.attempt is not None and latest.attempt != current:
                current = latest.attempt
                err.print(f"[dim]--- attempt {current} ---[/dim]", highlight=False)
                page = latest
                continue
        clock.sleep(FOLLOW_SECONDS)
        page = client.logs(job_id, attempt=current, offset=page.next_offset)


def _stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def register(app: typer.Typer, client: Callable[[], ApiClient], err: Console) -> None:
    """Add ``logs`` to the command line (``client`` reaches the daemon)."""

    @app.command()
    def logs(
        job_id: str = typer.Argument(..., help="the job whose output to show"),
        follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new output until the job ends"),
        attempt: Optional[int] = typer.Option(None, min=1, max=1_000_000,  # the API's bound
                                              help="this attempt's output (default: the latest)"),
    ) -> None:
        """The job's output (YOLOv9's stdout and stderr), as its machine shipped it to the daemon."""
        try:
            show_logs(client(), job_id, attempt=attempt, follow=follow, err=err)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

