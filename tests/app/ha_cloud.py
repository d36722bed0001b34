"""One sandbox cloud shared by several daemon processes: the Alibaba ECS emulator in a process of its own.

    python -m tests.app.ha_cloud --speedup 600 --clock-start 2026-11-20T08:00:00+00:00

Daemons point at it with ``GPUSCHED_BACKEND=live`` and the Alibaba endpoint it prints. Beside the
emulator it serves the market's own records (``GET /records``: every instance ever launched, released
ones included, with its client token and tags), which is what the failover tests count launches from:
the cloud's word, not the store's. It prints one JSON line with both addresses, then serves until SIGTERM.
No spot reclaims (a second attempt then means the scheduler made one), boots as in the sandbox.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from providers.catalog import filter_offers, load_catalog
from providers.emulators.alibaba_ecs import AlibabaEcsEmulator
from providers.sandbox.provider import SandboxCloud
from scheduler.clock import ScaledClock

KEY_ID, SECRET = "ha-key-id", "ha-key-secret"
REGION = "cn-hangzhou"


def _records(cloud: SandboxCloud) -> bytes:
    return json.dumps([
        {"instance_id": i.instance_id, "client_token": i.client_token, "tags": dict(i.tags), "state": i.state.value,
         "capacity": i.capacity.value, "launched_at": i.launched_at.isoformat()}
        for i in cloud.all_instances()
    ]).encode()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--speedup", type=float, required=True)
    ap.add_argument("--clock-start", type=datetime.fromisoformat, required=True)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args(argv)
    clock = ScaledClock(args.speedup, since=args.clock_start)
    offers = filter_offers(load_catalog(), providers=["alibaba"], regions=[REGION])
    cloud = SandboxCloud(clock, offers, seed=args.seed, interruption_scale=0.0)
    emulator = AlibabaEcsEmulator(cloud, {KEY_ID: SECRET})

    class Records(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
            body = _records(cloud) if self.path == "/records" else b"[]"
            self.send_response(200 if self.path == "/records" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    records = ThreadingHTTPServer(("127.0.0.1", 0), Records)
    threading.Thread(target=records.serve_forever, daemon=True).start()
    print(json.dumps({"endpoint": emulator.endpoint, "records": f"http://127.0.0.1:{records.server_port}/records",
                      "key_id": KEY_ID, "secret": SECRET, "region": REGION}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    finally:
        records.shutdown()
        emulator.close()


if __name__ == "__main__":
    main()
