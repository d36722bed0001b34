"""A local instance-metadata service that serves spot reclaim notices the way each cloud does.

One server answers for all three clouds' paths; ``notify(cloud, at)`` posts a notice, ``clear()`` takes
it back. AWS paths demand an IMDSv2 session token (PUT /latest/api/token first), as instances
configured for IMDSv2 only do.
"""

from __future__ import annotations

import json
import secrets
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_TENCENT_ZONE = timezone(timedelta(hours=8))


class MetadataServer:
    def __init__(self) -> None:
        self.notices: dict[str, str] = {}
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:  # noqa: N802 (http.server's naming)
                server.requests.append(("PUT", self.path))
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    token = secrets.token_urlsafe(16)
                    server.tokens.add(token)
                    return self._send(200, token)
                return self._send(400)

            def do_GET(self) -> None:  # noqa: N802
                server.requests.append(("GET", self.path))
                cloud = {"/latest/meta-data/spot/instance-action": "aws",
                         "/latest/meta-data/instance/spot/termination-time": "alibaba",
                         "/latest/meta-data/spot/termination-time": "tencent"}.get(self.path)
                if cloud is None:
                    return self._send(404)
                if cloud == "aws" and self.headers.get("X-aws-ec2-metadata-token") not in server.tokens:
                    return self._send(401)
                body = server.notices.get(cloud)
                return self._send(200, body) if body is not None else self._send(404)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def notify(self, cloud: str, at: datetime) -> None:
        """Post a reclaim notice for ``at`` in the cloud's own format."""
        at = at.astimezone(timezone.utc)
        if cloud == "aws":
            self.notices[cloud] = json.dumps({"action": "terminate", "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")})
        elif cloud == "alibaba":
            self.notices[cloud] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        elif cloud == "tencent":
            self.notices[cloud] = at.astimezone(_TENCENT_ZONE).strftime("%Y-%m-%d %H:%M:%S")
        else:
            raise ValueError(cloud)

    def clear(self) -> None:
        self.notices.clear()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
