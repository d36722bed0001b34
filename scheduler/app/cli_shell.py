"""The command line in the shell: ``gpusched --version`` and ``gpusched completion bash|zsh|fish``.

Completion is Typer's: the script asks ``gpusched`` itself for the candidates (commands, options, choices)
each time Tab is pressed, through the ``_GPUSCHED_COMPLETE`` variable, so it stays right after an upgrade.
``--install-completion`` (Typer's) writes it into the shell's start-up file; ``completion SHELL`` prints it
for you to put where you like.
"""

from __future__ import annotations

from enum import Enum
from importlib.metadata import PackageNotFoundError, version

import typer

PROG = "gpusched"
COMPLETE_VAR = "_GPUSCHED_COMPLETE"


def gpusched_version() -> str:
    try:
        return version("gpusched")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed: `pip install -e .`)"


def print_version(value: bool) -> None:
    """``--version``: an eager option, answered before any command runs."""
    if value:
        typer.echo(f"{PROG} {gpusched_version()}")
        raise typer.Exit(0)


class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def register(app: typer.Typer) -> None:
    """Add ``completion`` to the command line."""

    @app.command()
    def completion(shell: Shell = typer.Argument(..., help="bash, zsh or fish")) -> None:
        """Print the shell completion script, e.g. `gpusched completion bash > ~/.gpusched-complete.bash`."""
        from typer.completion import get_completion_script

        typer.echo(get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell.value))
