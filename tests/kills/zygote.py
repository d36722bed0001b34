"""``python -m tests.kills.zygote``: starts ``gpusched daemon`` processes fast, by fork, for the kill tier.

A kill campaign starts the daemon hundreds of times. A fresh interpreter spends seconds importing
the daemon's modules (FastAPI, SQLAlchemy, Alembic, both cloud SDKs, matplotlib) on a busy two-core
machine, so this process imports them once, then forks one child per start. The child is a fresh
daemon process in every way that matters: it sets its own environment, working folder and output,
and runs the CLI's own entry point (``scheduler.app.cli.main`` with ``gpusched daemon``), which
configures logging, opens the store, builds the providers and serves, exactly as the installed
``gpusched`` script does. Only the imports were done beforehand (no thread, engine or socket exists
here before the fork). ``tests/kills/daemon.py`` also starts the real script (``exec`` mode).

Protocol (one JSON object a line, on stdin; one answer a line on stdout):
  {"op": "spawn", "env": {...}, "cwd": DIR, "log": FILE, "plant": null|"random-token"} -> {"pid": N}
  {"op": "wait", "pid": N}  -> {"pid": N, "code": EXIT}   (blocks until the child is gone)
  {"op": "poll", "pid": N}  -> {"pid": N, "code": EXIT|null}
``plant: "random-token"`` is the planted bug of docs/reliability.md for the tier's self-test: that
child sends a fresh random client token with every launch instead of the one written ahead.
"""

from __future__ import annotations

import gc
import json
import os
import secrets
import signal
import sys
from typing import Any


def _preload() -> Any:
    import uvicorn.lifespan.on  # noqa: F401 - uvicorn imports its parts when it starts
    import uvicorn.loops.auto  # noqa: F401
    import uvicorn.protocols.http.auto  # noqa: F401

    import providers.alibaba.adapter  # noqa: F401 - GPUSCHED_PROVIDERS=alibaba,tencent
    import providers.tencent.adapter  # noqa: F401
    import scheduler.app.cli as cli
    import scheduler.app.wiring  # noqa: F401 - imported by the daemon command itself
    return cli


try:  # bound before any fork: a child of a threaded parent must not import (the import lock)
    import ctypes

    _PRCTL: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies, so no daemon outlives an interrupted test run."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _child(cmd: dict[str, Any], cli: Any) -> None:
    """In the forked child: become the daemon. Never returns."""
    code = 70
    try:
        die_with_parent()
        fd = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        os.chdir(cmd["cwd"])
        os.environ.clear()
        os.environ.update(cmd["env"])
        if cmd.get("plant") == "random-token":
            from scheduler.lifecycle import tick

            tick._request_token = lambda row: f"gs-planted-{secrets.token_hex(8)}"
        sys.argv = ["gpusched", "daemon"]
        try:
            cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report it in the log, then leave with a status
        import traceback

        traceback.print_exc()
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> None:
    die_with_parent()
    cli = _preload()
    gc.collect()
    gc.freeze()  # the children never walk (and so never copy) the parent's objects in a collection
    out = sys.stdout

    def answer(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    answer({"ready": True})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.get("op")
        if op == "spawn":
            pid = os.fork()
            if pid == 0:
                _child(cmd, cli)
            answer({"pid": pid})
        elif op in ("wait", "poll"):
            pid = int(cmd["pid"])
            try:
                got, status = os.waitpid(pid, 0 if op == "wait" else os.WNOHANG)
            except ChildProcessError:
                answer({"pid": pid, "code": None, "error": "no such child"})
                continue
            answer({"pid": pid, "code": os.waitstatus_to_exitcode(status) if got else None})
        else:
            answer({"error": f"unknown op {op!r}"})


if __name__ == "__main__":
    main()
