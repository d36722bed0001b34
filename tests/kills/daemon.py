"""Start, SIGKILL and stop the real daemon (``gpusched daemon``) for a kill campaign.

Two ways to start it, one daemon: ``fork`` asks the zygote (tests/kills/zygote.py, the daemon's
modules imported once) for a child that runs the CLI's entry point; ``exec`` runs the installed
``gpusched`` script, a fresh interpreter each time (seconds slower a start). Each start is a *life*;
its output goes to ``life-NNNN.log`` in the campaign's folder, kept for a failure's post-mortem.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Literal

from tests.kills.zygote import die_with_parent

Mode = Literal["fork", "exec"]
REPO = Path(__file__).resolve().parents[2]


class Zygote:
    """The forking helper process (see tests/kills/zygote.py); one per campaign."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-m", "tests.kills.zygote"], cwd=REPO,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._lock = threading.Lock()
        ready = self._read()
        if not ready.get("ready"):
            raise RuntimeError(f"the zygote did not start: {ready}")

    def _read(self) -> dict:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote exited ({self._proc.poll()})")
        return json.loads(line)

    def ask(self, **cmd: object) -> dict:
        with self._lock:
            stdin: IO[str] | None = self._proc.stdin
            assert stdin is not None
            stdin.write(json.dumps(cmd) + "\n")
            stdin.flush()
            return self._read()

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class Daemon:
    """The daemon of one campaign: at most one life at a time, on one store and one API port."""

    def __init__(self, folder: Path, env: dict[str, str], *, mode: Mode = "fork", plant: str | None = None) -> None:
        self.folder = folder
        self.env = env
        self.mode = mode
        self.plant = plant
        self.life = 0
        self.pid: int | None = None
        self.started_at = 0.0
        self._popen: subprocess.Popen | None = None
        self._zygote = Zygote() if mode == "fork" else None
        self._lock = threading.RLock()
        self.exits: list[tuple[int, int | None]] = []  # (life, exit status) of every life that ended
        if plant is not None and mode != "fork":
            raise ValueError("a planted bug needs the fork mode")

    @property
    def log(self) -> Path:
        return self.folder / f"life-{self.life:04d}.log"

    def start(self) -> int:
        """A new life; returns its number."""
        with self._lock:
            if self.pid is not None:
                raise RuntimeError(f"life {self.life} is still running")
            self.life += 1
            self.started_at = time.monotonic()
            if self._zygote is not None:
                self.pid = int(self._zygote.ask(op="spawn", env=self.env, cwd=str(self.folder), log=str(self.log),
                                                plant=self.plant)["pid"])
            else:
                gpusched = Path(sys.executable).with_name("gpusched")
                with open(self.log, "ab") as out:
                    self._popen = subprocess.Popen([str(gpusched), "daemon"], cwd=self.folder, env=self.env,
                                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                                   preexec_fn=die_with_parent)
                self.pid = self._popen.pid
            return self.life

    def _reap(self, block: bool) -> int | None | bool:
        """The exit status once the life ended (False while it runs)."""
        assert self.pid is not None
        if self._zygote is not None:
            code = self._zygote.ask(op="wait" if block else "poll", pid=self.pid)["code"]
            return False if code is None and not block else code
        assert self._popen is not None
        if block:
            return self._popen.wait()
        polled = self._popen.poll()
        return False if polled is None else polled

    def _ended(self, code: int | None) -> None:
        self.exits.append((self.life, code))
        self.pid = None
        self._popen = None

    def kill(self, life: int | None = None) -> bool:
        """SIGKILL the running life (only ``life``, when given) and wait until it is gone.
        False when there was nothing to kill: that life had already ended."""
        with self._lock:
            if self.pid is None or (life is not None and life != self.life):
                return False
            os.kill(self.pid, signal.SIGKILL)
            self._ended(self._reap(block=True))  # type: ignore[arg-type]
            return True

    def alive(self) -> bool:
        """Whether the current life still runs (a life that ended by itself is recorded)."""
        with self._lock:
            if self.pid is None:
                return False
            code = self._reap(block=False)
            if code is False:
                return True
            self._ended(code)  # type: ignore[arg-type]
            return False

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, as systemd stops it; its exit status (SIGKILL after ``timeout``)."""
        with self._lock:
            if self.pid is None:
                return None
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                code = self._reap(block=False)
                if code is not False:
                    self._ended(code)  # type: ignore[arg-type]
                    return code  # type: ignore[return-value]
                time.sleep(0.05)
            os.kill(self.pid, signal.SIGKILL)
            code = self._reap(block=True)
            self._ended(code)  # type: ignore[arg-type]
            return -9

    def close(self) -> None:
        with self._lock:
            if self.pid is not None:
                self.kill()
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None

    def tail(self, lines: int = 40) -> str:
        """The end of the current (or last) life's log, for a failure message."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
