"""Limits before work, against a real uvicorn server in its own process: a body is refused by its token
before it is read, and by its size while it streams in; the server's memory stays flat meanwhile."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from scheduler.app.api import AGENT_BODY_BYTES, MAX_BODY_BYTES
from scheduler.clock import SystemClock
from tests.agent.machines import machine_token

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "limits-test-api-token-0123456789"
MIB = 1 << 20
HOSTILE_BODY = 200 * MIB
# "A few MiB": the job route may hold up to its limit (2 MiB) while it reads; nothing more than that.
GROWTH_ALLOWED = 6 * MIB
JOB = {"name": "helmet-v3", "team": "vision-qa", "kind": "train", "model": "yolov9-s",
       "data": {"uri": "s3://bucket/datasets/helmet", "train_images": 12000}, "train": {"epochs": 10}}

SERVER = """
import sys
import uvicorn
from pydantic import SecretStr
from scheduler.app.api import create_app
from scheduler.clock import SystemClock
from scheduler.settings import Settings
from scheduler.store.database import Store

db, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = Store(f"sqlite:///{db}")
store.migrate()
app = create_app(store, SystemClock(), Settings(_env_file=None, api_token=SecretStr(token)))
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                reason="reads the server's resident memory from /proc (Linux)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc, self.port = proc, port

    def status_kib(self, field: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.proc.pid}/status")

    def reset_peak(self) -> int:
        """Reset the process's peak resident memory (VmHWM) to now; returns the resident bytes now."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
        return self.status_kib("VmRSS") * 1024

    def peak(self) -> int:
        return self.status_kib("VmHWM") * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = _free_port()
    db = tmp_path_factory.mktemp("limits") / "gpusched.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(db), str(port), TOKEN], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "the server did not start within 60 s"
            time.sleep(0.2)
        # Warm up what a first request loads (routes, the job model, SQLAlchemy), so growth is the body's.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.post(f"http://127.0.0.1:{port}/v1/jobs", json={"spec": JOB}, headers=auth).status_code == 201
        assert httpx.post(f"http://127.0.0.1:{port}/v1/agent/progress", json={},
                          headers={"Authorization": "Bearer bad"}).status_code == 401
        yield Server(proc, port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def stream(port: int, path: str, headers: dict[str, str], total: int, *, chunked: bool = True) -> tuple[int, int]:
    """POST ``total`` bytes to ``path`` in 1 MiB chunks (chunked transfer encoding, or with a Content-Length),
    stopping as soon as the server answers or stops taking them. Returns (status, bytes sent)."""
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
            "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}",
            *(f"{k}: {v}" for k, v in headers.items())]
    chunk = b"x" * MIB
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        while sent < total:
            if select.select([sock], [], [], 0)[0]:
                break  # the answer is there
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                break  # the server closed the connection or stopped reading
            sent += len(chunk)
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:
                data = sock.recv(65536)
                if not data:
                    break
                answer += data
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 "), f"no answer after {sent} bytes: {answer[:80]!r}"
    return int(answer.split(b" ", 2)[1]), sent


@pytest.mark.parametrize(("path", "auth", "chunked", "status"), [
    ("/v1/agent/progress", "Bearer not-a-machine-token", True, 401),
    ("/v1/agent/progress", "", True, 401),
    ("/v1/jobs", "Bearer wrong-token-0123456789", True, 401),
    ("/v1/agent/progress", "Bearer not-a-machine-token", False, 401),
    ("/v1/jobs", f"Bearer {TOKEN}", True, 413),  # a valid token: read up to the limit, then 413
    ("/v1/jobs", f"Bearer {TOKEN}", False, 413),  # Content-Length over the limit: 413 before reading
])
def test_a_200_mib_body_is_refused_and_the_servers_memory_stays_flat(server, path, auth, chunked, status):
    before = server.reset_peak()
    code, sent = stream(server.port, path, {"Authorization": auth} if auth else {}, HOSTILE_BODY, chunked=chunked)
    growth = server.peak() - before
    print(f"{path} {auth[:12]!r} chunked={chunked}: {code} after {sent / MIB:.0f} MiB sent; "
          f"peak resident memory +{growth / MIB:.2f} MiB")
    assert code == status
    assert growth <= GROWTH_ALLOWED, f"the server grew {growth / MIB:.1f} MiB"
    assert sent < HOSTILE_BODY  # the server answered (and closed) long before the body ended
    assert httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5).status_code == 200


def test_the_limits_answer_413_in_the_apis_shape_and_a_body_under_them_passes(server):
    base = f"http://127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{base}/v1/jobs", content=b"x" * (MAX_BODY_BYTES + 1), headers=auth)
    assert r.status_code == 413 and r.headers["connection"] == "close"
    assert r.json() == {"error": f"request body over {MAX_BODY_BYTES} bytes", "fix": "send one job file per request"}
    # Just under the job limit: read whole, then judged as a job file (not JSON: 400).
    r = httpx.post(f"{base}/v1/jobs", content=b"x" * (MAX_BODY_BYTES - 1), headers=auth)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]

    def chunks(n: int) -> Iterator[bytes]:  # no Content-Length: httpx sends it chunked
        yield json.dumps({"job_id": "job-1", "attempt": 1}).encode()[:-1] + b', "pad": "'
        yield b"x" * n
        yield b'"}'

    machine = {"Authorization": f"Bearer {machine_token(TOKEN, 'inst-00000000000a', SystemClock())}"}
    r = httpx.post(f"{base}/v1/agent/heartbeat", content=chunks(AGENT_BODY_BYTES), headers=machine)
    assert r.status_code == 413 and "a few hundred bytes" in r.json()["fix"]
    # A genuine token of a machine the daemon does not know: its body is small, and the machine refused.
    r = httpx.post(f"{base}/v1/agent/heartbeat", content=chunks(10), headers=machine)
    assert r.status_code == 401
