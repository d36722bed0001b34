"""The ``gpusched`` command line (Typer + Rich).

Commands that need the daemon (submit, status, logs, cancel) talk to its HTTP API and
say plainly when it cannot be reached. Commands that only read files or the
store (validate, schema, plan, report, demo) work without it. Some commands live in
their own modules beside this one (``cli_jobs``, ``cli_clouds``, ``cli_shell``, ``cli_sim``) and are
added to ``app`` here; listings take ``--json``.

Every failure is one line on stderr, ``error: <what is wrong>; fix: <what to do>``
(a job file adds one line per field at fault), and an exit status (README, "Exit statuses"):

0  done
1  it failed for a reason outside what you typed: a cloud error, a failed check, a bug
   (``gpusched --traceback ...`` shows a bug's traceback, for a report)
2  what you gave is wrong: the command line, a file, a setting, or a job the planner refuses
3  something the command needs cannot be reached or used: the daemon's API or the store

Text that came from files, the store or machines is printed escaped: a ``[/x]`` in a
file name is shown, never read as Rich markup.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

try:  # typer vendors click from 0.2x on; before, it used click itself
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[no-redef]

from scheduler.app import cli_clouds, cli_jobs, cli_progress, cli_shell, cli_sim
from scheduler.app.cli_text import print_json, shown, team_option
from scheduler.app.cli_tokens import register as register_token_commands
from scheduler.errors import (
    DaemonUnreachable,
    GpuschedError,
    JobFileError,
    ProviderError,
    StoreUnavailable,
    UserError,
)
from scheduler.states import JobState

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3

out = Console()
err = Console(stderr=True)
_show_traceback = False
_STATES = tuple(JobState)


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _say(label: str, message: str, fix: str | None = None) -> None:
    line = _one_line(message) + (f"; fix: {_one_line(fix)}" if fix else "")
    err.print(f"[red]{label}[/red]: {shown(line)}", soft_wrap=True, highlight=False)


def _print_job_error(exc: JobFileError) -> None:
    err.print(f"[red]error[/red] in {shown(exc.path)}:", soft_wrap=True, highlight=False)
    for p in exc.problems:
        line = f"  [bold]{shown(p.field)}[/bold]: {shown(_one_line(p.message))}"
        if p.example:
            line += f" (e.g. {shown(_one_line(p.example))})"
        err.print(line, soft_wrap=True, highlight=False)


def _fail(exc: BaseException, ctx: Any) -> NoReturn:
    """Print ``exc`` as one line and exit with its documented status."""
    if isinstance(exc, UsageError):
        where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
        _say("error", exc.format_message().rstrip("."), f"see `{where} --help`")
        raise typer.Exit(EXIT_BAD_INPUT)
    if isinstance(exc, typer.TyperException):  # the command line's other errors (click's FileError ...)
        _say("error", exc.format_message())
        raise typer.Exit(exc.exit_code)
    if isinstance(exc, JobFileError):
        _print_job_error(exc)
        raise typer.Exit(EXIT_BAD_INPUT)
    if isinstance(exc, (DaemonUnreachable, StoreUnavailable)):
        _say("error", exc.message, exc.fix)
        raise typer.Exit(EXIT_UNREACHABLE)
    if isinstance(exc, UserError):
        _say("error", exc.message, exc.fix)
        raise typer.Exit(EXIT_BAD_INPUT)
    if isinstance(exc, ProviderError):
        _say("cloud error", f"({exc.provider or 'provider'} {exc.code}) {exc.message}".replace("  ", " "), exc.fix)
        raise typer.Exit(EXIT_FAILED)
    if isinstance(exc, GpuschedError):
        _say("error", exc.message, exc.fix)
        raise typer.Exit(EXIT_FAILED)
    if isinstance(exc, OSError) and exc.strerror:
        name = f" {exc.filename}" if exc.filename is not None else ""
        _say("error", f"{exc.strerror}:{name}", "check the path and its permissions")
        raise typer.Exit(EXIT_FAILED)
    _say("internal error", f"{type(exc).__name__}: {exc}",
         "this is a bug in gpusched; run the command again with `gpusched --traceback ...` and report it")
    raise typer.Exit(EXIT_FAILED)


class _Cli(TyperGroup):
    """The root command: every error of every sub-command becomes one line and an exit status (``_fail``)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, NoArgsIsHelpError):
            raise
        except typer.TyperException as exc:
            _fail(exc, ctx)
        except Exception as exc:  # noqa: BLE001 - the one place where every error becomes a line
            if _show_traceback:
                raise
            _fail(exc, ctx)


app = typer.Typer(
    cls=_Cli,
    name="gpusched",
    help="Schedule YOLOv9 jobs on rented cloud GPUs as cheaply as their deadlines allow.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion; `gpusched completion SHELL` prints it
)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")
register_token_commands(app)  # `token create|list|revoke|whoami` and `audit` (cli_tokens.py)


@app.callback()
def _root(
    traceback: bool = typer.Option(False, "--traceback", help="on an unexpected error, show its traceback "
                                   "(for a bug report) instead of one line"),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=cli_shell.print_version,
                                 help="print gpusched's version and exit"),
) -> None:
    global _show_traceback
    _show_traceback = traceback


def _settings():
    from scheduler.settings import load_settings

    return load_settings()


def _setup_logging(settings, *, daemon: bool = False) -> None:
    from scheduler.logs import configure_logging

    fmt = settings.log_format if daemon else "console"
    level = settings.log_level if daemon else "warning"
    configure_logging(fmt, level)


# --- job files -------------------------------------------------------------------


@app.command()
def validate(files: list[Path] = typer.Argument(..., help="job.yaml files to check")) -> None:
    """Check job files; print every problem with its field and a fix."""
    from scheduler.jobs.jobfile import load_job_file

    bad = 0
    for f in files:
        try:
            spec = load_job_file(f)
        except JobFileError as exc:
            bad += 1
            _print_job_error(exc)
            continue
        out.print(f"[green]ok[/green] {shown(f)}: {spec.kind.value} {spec.model} for team {spec.team}",
                  highlight=False, soft_wrap=True)  # one line per file, whatever the terminal's width
    if bad:
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command()
def schema() -> None:
    """Print the JSON Schema of job.yaml (for editors and CI linters)."""
    from scheduler.jobs.jobfile_schema import job_json_schema

    sys.stdout.write(json.dumps(job_json_schema(), indent=2) + "\n")


@app.command("plan")
def plan_cmd(
    file: Path = typer.Argument(..., help="the job.yaml to plan"),
    at: Optional[str] = typer.Option(None, help="plan as of this ISO 8601 time, e.g. 2026-11-02T09:00:00+08:00 "
                                     "(no offset: UTC; default: now)"),
    show: int = typer.Option(12, min=0, help="how many alternatives to show"),
) -> None:
    """Show where and how a job would run, what it would cost, and the alternatives."""
    from providers.registry import build_providers
    from scheduler.clock import SystemClock
    from scheduler.jobs.jobfile import load_job_file
    from scheduler.lifecycle.fleet import reserved_slots
    from scheduler.lifecycle.steering import steered
    from scheduler.planner.fallback import fall_back
    from scheduler.planner.inputs import PlanJob, PlannerPolicy
    from scheduler.planner.plan import options_for, plan

    settings = _settings()
    spec = load_job_file(file)
    now = _iso_time(at, "--at") if at else SystemClock().now()
    providers = build_providers(settings, SystemClock())
    offers = [o for p in providers.values() for o in p.offers()]
    fleet = reserved_slots(settings.reserved, offers, now, strict=True)
    policy = PlannerPolicy(currency=settings.report_currency, fx=settings.fx)
    # As the daemon plans it: a job the steering rule will watch may start on spot as a stint.
    job = PlanJob(id="plan", spec=spec, submitted_at=now, deadline_at=spec.deadline_at(now),
                  stint=steered(spec, policy.strategy))
    decision = fall_back(plan([job], offers, fleet, now, policy)[0], job, offers, now, policy)  # as the daemon
    options = options_for(job, offers, fleet, now, policy)
    title = f"{spec.name}: {spec.kind.value} {spec.model}"
    if job.deadline_at:
        title += f", deadline {job.deadline_at:%Y-%m-%d %H:%M %Z}"
    if spec.policy.budget:
        title += f", budget {spec.policy.budget}"
    table = Table(title=shown(title), show_lines=False)
    for col in ("", "GPU", "cloud / region / instance type", "capacity", "est. hours", "est. cost",
                "finish by (UTC)", "why"):
        table.add_column(col, overflow="fold")
    chosen = decision.choice
    # One row per (cloud, GPU, instance type, capacity): its best zone. Zones of one type clutter the table.
    rows, seen = [], set()
    for opt in ([chosen] if chosen else []) + options:
        key = (opt.provider, opt.gpu, opt.instance_type, opt.capacity, opt.source)
        if key not in seen:
            seen.add(key)
            rows.append(opt)
    for opt in rows[:show]:
        mark = "→" if chosen is not None and opt == chosen else ""
        style = "bold green" if mark else ("" if opt.feasible else "dim")
        table.add_row(
            mark,
            f"{opt.gpu_count}x {opt.gpu}",
            shown(f"{opt.provider} / {opt.zone} / {opt.instance_type}"),
            opt.capacity.value + (" (warm)" if opt.source == "warm" else ""),
            f"{opt.est_hours:.1f}",
            shown(opt.est_cost),
            f"{opt.finish_by:%m-%d %H:%M}",
            shown(opt.why),
            style=style,
        )
    out.print(table)
    if len(rows) > show:
        out.print(f"[dim]{len(rows) - show} more (cloud, GPU, type, capacity) choices: --show {len(rows)}[/dim]")
    verdict = {"launch": "would launch", "reuse": "would reuse", "wait": "would wait", "refuse": "refused"}
    out.print(f"[bold]{verdict[decision.action]}[/bold]: {shown(decision.reason)}")
    if decision.action == "refuse":
        raise typer.Exit(EXIT_BAD_INPUT)


def _iso_time(text: str, option: str) -> datetime:
    """An ISO 8601 time from the command line; without an offset it is UTC."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 time; e.g. 2026-11-02T09:00:00+08:00",
                                 param_hint=f"'{option}'") from None
    if not PLAN_YEARS[0] <= when.year <= PLAN_YEARS[1]:  # deadlines and finish times past it overflow
        raise typer.BadParameter(f"{text!r} is outside the years {PLAN_YEARS[0]}-{PLAN_YEARS[1]}",
                                 param_hint=f"'{option}'")
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


PLAN_YEARS = (1970, 2199)


# --- the daemon's API ------------------------------------------------------------------


def _client(settings):
    from scheduler.app.client import ApiClient

    token = settings.api_token.get_secret_value() if settings.api_token else None
    return ApiClient(settings.base_url, token)


@app.command()
def submit(file: Path = typer.Argument(..., help="the job.yaml to submit")) -> None:
    """Validate a job file and queue it with the daemon."""
    from scheduler.jobs.jobfile import load_job_file

    settings = _settings()
    try:
        spec = load_job_file(file)
    except JobFileError as exc:
        if not any(p.field == "team" for p in exc.problems):
            raise
        # No team in the file: the daemon takes the token's own team (or says which to name).
        job = _client(settings).submit_text(file.read_text(encoding="utf-8"), source=str(file))
    else:
        job = _client(settings).submit(spec.model_dump(mode="json"), source=str(file))
    out.print(f"submitted [bold]{shown(job.id)}[/bold] ({shown(job.name)}, team {shown(job.team)}): "
              f"{shown(job.state)}")
    out.print(f"watch it with: gpusched status {shown(job.id)}", highlight=False)


@app.command()
def status(
    job_id: Optional[str] = typer.Argument(None, help="a job id for its details; omit to list jobs"),
    state: Optional[str] = typer.Option(None, help="only jobs in this state"),
    team: Optional[str] = typer.Option(None, help="only this team's jobs"),
    as_json: bool = typer.Option(False, "--json", help="the daemon's answer as JSON, as it came"),
) -> None:
    """List jobs, or one job: its state, where it runs, progress, cost, plan and last events."""
    from scheduler.app.cli_jobs import job_summary

    team = team_option(team)
    if state is not None and state not in _STATES:
        raise typer.BadParameter(f"{state!r} is not a job state; use one of: {', '.join(_STATES)}",
                                 param_hint="'--state'")
    settings = _settings()
    client = _client(settings)
    if job_id:
        if as_json:
            print_json(client.get_job_json(job_id))
        else:
            out.print(job_summary(client.get_job(job_id)), highlight=False)
        return
    if as_json:
        print_json(client.list_jobs_json(state=state, team=team))
        return
    jobs = client.list_jobs(state=state, team=team)
    table = Table(title=f"{len(jobs)} job(s)")
    for col in ("id", "name", "team", "by", "kind", "state", "progress", "reason"):
        table.add_column(col, overflow="fold")
    for j in jobs:
        unit = "shards" if j.kind == "infer" else "ep"
        progress = f"{j.epochs_done}/{j.epochs_total} {unit}" if j.epochs_total else ""
        # The reason may be a machine's own words (a finish message): shown literally.
        table.add_row(*(shown(v) for v in (j.id, j.name, j.team, j.submitted_by or "", j.kind, j.state, progress,
                                           j.reason or "")))
    out.print(table)


@app.command()
def cancel(job_id: str = typer.Argument(..., help="the job to cancel")) -> None:
    """Cancel a job; its machine is freed on the daemon's next tick."""
    job = _client(_settings()).cancel(job_id)
    out.print(f"{shown(job.id)}: {shown(job.state)}", highlight=False)


cli_jobs.register(app, lambda: _client(_settings()), err)  # `gpusched logs`


@app.command(hidden=True)
def agent() -> None:
    """On a cloud instance: run the work the daemon gives this machine while it lives (started by cloud-init)."""
    import httpx

    from scheduler.agent import machine
    from scheduler.agent.bootstrap import BACKSTOP_MESSAGE
    from scheduler.agent.runner import AgentConfig, run_machine_agent
    from scheduler.clock import SystemClock

    cfg = AgentConfig.from_env()
    _setup_logging(_settings(), daemon=True)
    clock = SystemClock()

    def push_backstop(until: datetime) -> None:
        machine.push_shutdown(until, clock.now(), BACKSTOP_MESSAGE)

    with httpx.Client(timeout=30) as http:
        run_machine_agent(cfg, http, clock=clock, backstop=push_backstop if cfg.shutdown_backstop else None)
    # Every job's outcome, failed or not, is reported, and the loop ends only when the daemon says the
    # machine is going: exit 0, so that the service manager's Restart=on-failure restarts only an
    # agent that crashed (which asks for its work again; a job reported finished is not handed out again).
    raise typer.Exit(0)


@app.command()
def daemon() -> None:
    """Run the scheduler: the tick, the monthly report and the HTTP API."""
    from scheduler.app.wiring import run_daemon

    settings = _settings()
    _setup_logging(settings, daemon=True)
    run_daemon(settings)


# --- reports, demo, database -------------------------------------------------------------


@app.command()
def report(
    month: str = typer.Option(..., help="the month, e.g. 2026-11"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="folder for the files (default: the report dir)"),
    send: bool = typer.Option(False, "--send", help="also mail it (GPUSCHED_SMTP_URL, GPUSCHED_REPORT_MAIL_TO) and "
                              "post its summary to the chat webhooks (GPUSCHED_WEBHOOKS) now"),
    focus: bool = typer.Option(False, "--focus", help="also the month's ledger as FinOps FOCUS 1.0 (focus-MONTH.csv)"),
    reconcile: Optional[bool] = typer.Option(None, "--reconcile/--no-reconcile",
                                             help="match the clouds' own bills (GPUSCHED_BILLS) to the ledger in "
                                             "the report [default: when GPUSCHED_BILLS is set]"),
    progress: Optional[bool] = cli_progress.progress_option(),
) -> None:
    """Write the monthly cost report (HTML with charts, CSV, Markdown, XLSX, PDF) from the store; --send delivers it."""
    from scheduler.accounting.delivery import channels_configured
    from scheduler.accounting.report_delivery import REPORT_STEPS, write_and_send
    from scheduler.app.cli_bills import bill_readers
    from scheduler.app.startup import open_store
    from scheduler.clock import SystemClock

    settings = _settings()
    readers = bill_readers(settings, SystemClock(), required=True) if reconcile or \
        (reconcile is None and settings.bills) else None
    _writable_folder(out_dir or settings.reports_path, "--out" if out_dir else "GPUSCHED_REPORT_DIR")
    if send and not channels_configured(settings):
        raise UserError("--send has nowhere to send the report",
                        fix="set GPUSCHED_SMTP_URL and GPUSCHED_REPORT_MAIL_TO for mail, and/or "
                            "GPUSCHED_WEBHOOKS=slack=URL,dingtalk=URL,wecom=URL,feishu=URL for chat")
    if send:
        _setup_logging(settings)
    store = open_store(settings)  # the data folder and the store checked: one line each when they are not sound
    steps = [n for n in REPORT_STEPS if (n != "focus" or focus) and (n != "send" or send)]
    try:
        with cli_progress.Bar(err, f"report {month}", len(steps), enabled=cli_progress.wanted(progress, err)) as bar:
            def step(name: str) -> None:
                bar.update(steps.index(name) if name in steps else 0, status=name)

            sent = write_and_send(settings, month, out_dir=out_dir, send=send, store=store, focus=focus,
                                  bills=readers, step=step)
            bar.update(len(steps), status="written")
    finally:
        store.dispose()
    for kind, path in sent.paths.items():
        out.print(f"{kind}: {shown(path)}", highlight=False)
    for o in sent.outcomes:
        mark = "[green]sent[/green]  " if o.ok else "[red]FAILED[/red]"
        out.print(f"{mark} {o.channel:<8} {escape(o.detail)}", highlight=False)
    if sent.failed:
        err.print(f"[red]error[/red]: {len(sent.failed)} of {len(sent.outcomes)} channel(s) failed; the report files "
                  "above are kept. Fix the channel and run the same command again.")
        raise typer.Exit(1)


@app.command()
def bills(
    month: str = typer.Option(..., help="the month, e.g. 2026-11"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="folder for bills-MONTH.csv (default: the report dir)"),
) -> None:
    """Read the clouds' own bills (GPUSCHED_BILLS) for a month and match them to the ledger: per cloud the
    difference, the billed instances gpusched does not know, and the ledger's instances the bill lacks."""
    from scheduler.app.cli_bills import run_bills

    settings = _settings()
    if out_dir is not None:
        _writable_folder(out_dir, "--out")
    raise typer.Exit(run_bills(settings, month, out_dir, out))


def _writable_folder(folder: Path, what: str) -> None:
    """Create ``folder`` for output, or say in one line why it cannot be."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{what} {folder} is a file, not a folder",
                        fix=f"give {what} a folder (it is created if missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {what} {folder}: {exc.strerror or type(exc).__name__}",
                        fix=f"give {what} a folder this user can write") from None


@app.command()
def demo(
    out_dir: Path = typer.Option(Path("gpusched-demo"), "--out", help="where the demo's store and report go"),
    seed: int = typer.Option(7, help="seed for the sandbox cloud (same seed, same run)"),
    via_emulators: bool = typer.Option(
        False, "--via-emulators",
        help="reach Alibaba, Tencent and Huawei through their real SDKs and the HTTP emulators"),
    progress: Optional[bool] = cli_progress.progress_option(),
) -> None:
    """Run the daemon's tick on the sandbox cloud in simulated time and write a report."""
    from scheduler.simulation.demo import SCHEDULE, START, DemoProgress, run_demo

    _writable_folder(out_dir, "--out")
    with cli_progress.Bar(err, "demo: jobs done", len(SCHEDULE), enabled=cli_progress.wanted(progress, err),
                          out=out) as bar:
        def tell(p: DemoProgress) -> None:
            bar.update(p.jobs_done, status=f"day {(p.now - START).total_seconds() / 86400:.1f}, {p.ticks:,} ticks")

        run_demo(out_dir=out_dir, seed=seed, console=bar.console, via_emulators=via_emulators, progress=tell)


providers_app = typer.Typer(help="Cloud providers: credentials, reachability, offers.", no_args_is_help=True)
app.add_typer(providers_app, name="providers")
cli_clouds.register(app, providers_app, lambda: _settings(), out)  # `perf`, `providers check`, `offers`
cli_shell.register(app)  # `gpusched completion SHELL`
cli_sim.register(app, lambda: _settings(), out, err, _writable_folder)  # `simulate`, `trace`, `bench`


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the store to the latest schema."""
    from scheduler.app.startup import open_store

    store = open_store(_settings())
    store.dispose()
    out.print(f"store at {shown(store.url.render_as_string(hide_password=True))} is up to date", highlight=False)


def main() -> None:
    """Console entry point; errors become one line and an exit status inside ``app`` (``_Cli``)."""
    app()


if __name__ == "__main__":
    main()
