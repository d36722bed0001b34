"""The job's output to the daemon (``POST /v1/agent/logs``), for ``gpusched logs``.

The job's process writes its stdout and stderr to the attempt's log file on the machine
(``process.job_launcher``); a thread of the agent reads what is new every ``interval`` seconds and sends
the whole lines, cleaned (``jobs/output_text.py``), in batches of at most ``BATCH_BYTES``, each with its
position in the attempt's output (bytes, counted over what is sent). A batch whose answer did not come
is sent again from the same position (with what the job wrote since), and the daemon keeps each byte
once. When the attempt ends the rest goes, the last unfinished line too, before the outcome is reported
(so a failed job's last words are there when its state shows).

Only rank 0 of a multi-node job ships (it speaks for the gang). A 409 or 401 ends the shipping: the
attempt is no longer this machine's. Output never stops the job: a daemon that cannot be reached only
delays it, and the log file on the machine stays whole.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import structlog

from scheduler.agent.config import Work
from scheduler.agent.link import DaemonLink, Refused, Stale
from scheduler.jobs.output_text import BATCH_BYTES, clean_lines, utf8_size

log = structlog.get_logger("gpusched.agent")

SHIP_SECONDS = 10.0  # how often new output goes to the daemon: `gpusched logs -f` lags by about this
READ_BYTES = 4 * BATCH_BYTES  # read from the log file at a time
LONG_LINE_BYTES = 64 << 10  # an unfinished line longer than this is sent as it is (cut to MAX_LINE_CHARS)


class OutputShipper:
    """Ships one attempt's log file to the daemon while the attempt runs (``start``), and the rest at its
    end (``finish``)."""

    def __init__(self, link: DaemonLink, work: Work, log_path: Path, *, interval: float = SHIP_SECONDS) -> None:
        self.link, self.work, self.log_path, self.interval = link, work, log_path, interval
        self.sent = 0  # bytes of cleaned output the daemon has (the next batch's offset)
        self._read = 0  # bytes of the log file read
        self._carry = b""  # the start of a line the process has not ended yet
        self._ready = ""  # cleaned lines read and not sent yet
        self._gone = False  # the daemon says the attempt is not this machine's any more
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpusched-logs", daemon=True)

    def start(self) -> OutputShipper:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (what it has not sent stays unsent)."""
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def finish(self, *, must_arrive: bool) -> None:
        """Send the rest, the unfinished last line too; ``must_arrive``: retried while the daemon cannot
        be reached (as the outcome is), else one try (a machine being reclaimed has no time to wait)."""
        self.stop()
        with self._lock:
            self._ship(final=True, must_arrive=must_arrive)

    def ship(self) -> bool:
        """Send what is new now, in whole lines; whether all of it arrived."""
        with self._lock:
            return self._ship(final=False, must_arrive=False)

    def _run(self) -> None:
        while not self._halt.wait(self.interval):
            try:
                self.ship()
            except Exception as exc:  # noqa: BLE001 - the output never takes the agent down
                log.warning("output_not_shipped", job_id=self.work.job_id, error=f"{type(exc).__name__}: {exc}")

    def _ship(self, *, final: bool, must_arrive: bool) -> bool:
        while not self._gone:
            batch = self._next_batch(final)
            if not batch:
                return True
            if not self._send(batch, must_arrive):
                return False
        return False

    def _next_batch(self, final: bool) -> str:
        """The next batch: whole cleaned lines, at most ``BATCH_BYTES`` (read from the file as needed)."""
        while utf8_size(self._ready) < BATCH_BYTES and self._read_more(final):
            pass
        if utf8_size(self._ready) <= BATCH_BYTES:
            return self._ready
        data = self._ready.encode("utf-8")
        cut = data.rfind(b"\n", 0, BATCH_BYTES) + 1  # a cleaned line is far shorter than a batch
        return data[:cut].decode("utf-8")

    def _read_more(self, final: bool) -> bool:
        """Read the next part of the log file into ``_ready``; whether the file had more."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._read)
                new = f.read(READ_BYTES)
        except OSError:
            new = b""  # no output yet
        self._read += len(new)
        data = self._carry + new
        end = data.rfind(b"\n") + 1
        lines, rest = data[:end], data[end:]
        if b"\r" in rest:  # a progress bar redrawn in place: only its last state counts
            rest = rest[rest.rfind(b"\r"):]
        if final or len(rest) > LONG_LINE_BYTES:
            lines, rest = lines + rest + (b"\n" if rest else b""), b""
        self._carry = rest
        self._ready += clean_lines(lines.decode("utf-8", errors="replace"))
        return bool(new)

    def _send(self, batch: str, must_arrive: bool) -> bool:
        body = {"job_id": self.work.job_id, "attempt": self.work.attempt, "offset": self.sent, "text": batch}
        try:
            if must_arrive:
                self.link.deliver("POST", "/logs", body)
            else:
                self.link.request("POST", "/logs", body)
        except (Stale, Refused) as exc:
            self._gone = True
            log.info("output_shipping_ends", job_id=self.work.job_id, attempt=self.work.attempt, why=str(exc))
            return False
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code >= 500:
                return False  # tried again next time
            # Refused for good (a bug on one side): skipped; the daemon shows the gap as output not kept.
            log.warning("output_refused", job_id=self.work.job_id, status=exc.response.status_code)
        except httpx.TransportError as exc:
            log.warning("output_not_shipped", job_id=self.work.job_id, error=str(exc))
            return False
        self.sent += utf8_size(batch)
        self._ready = self._ready[len(batch):]
        return True
