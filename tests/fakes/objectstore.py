"""An object store in memory, for the agent's tests: the ``ObjectStore`` interface over a dict.

It keeps ``scheduler.agent.storage``'s contract where the agent relies on it: a prefix is a folder, nothing under
a prefix is ``NotFound``, a missing object is ``NotFound``, keys keep their relative paths. ``fail``
makes the next calls on a URI prefix raise an error of the caller's choosing (a role without
permission, a throttled bucket), ``calls`` records what was asked, in order.
"""

from __future__ import annotations

from pathlib import Path

from scheduler.agent.storage.base import parse_uri
from scheduler.errors import GpuschedError, NotFound


class MemoryStore:
    def __init__(self, objects: dict[str, bytes] | None = None) -> None:
        self.objects: dict[str, bytes] = dict(objects or {})
        self.calls: list[tuple[str, str]] = []
        self.failures: list[tuple[str, str, GpuschedError, int]] = []  # (op or "*", prefix, error, times)

    def __call__(self, uri: str) -> MemoryStore:
        """The store for a URI: this one, whatever the scheme (the agent's ``stores`` factory)."""
        parse_uri(uri)
        return self

    # --- set-up and inspection ---------------------------------------------------------

    def put(self, uri: str, data: bytes | str) -> None:
        self.objects[uri] = data.encode() if isinstance(data, str) else data

    def put_file(self, uri: str, path: str | Path) -> None:
        self.objects[uri] = Path(path).read_bytes()

    def put_tree(self, prefix: str, files: dict[str, bytes | str]) -> None:
        for rel, data in files.items():
            self.put(prefix.rstrip("/") + "/" + rel, data)

    def under(self, prefix: str) -> dict[str, bytes]:
        """Objects under ``prefix``, by their key relative to it."""
        prefix = prefix.rstrip("/") + "/"
        return {k[len(prefix):]: v for k, v in self.objects.items() if k.startswith(prefix)}

    def fail(self, op: str, prefix: str, error: GpuschedError, times: int = 1_000_000) -> None:
        """Make the next ``times`` calls of ``op`` ("*" for any) on URIs under ``prefix`` raise ``error``."""
        self.failures.append((op, prefix, error, times))

    def _call(self, op: str, uri: str) -> None:
        self.calls.append((op, uri))
        for n, (fop, prefix, error, times) in enumerate(self.failures):
            if (fop in ("*", op)) and uri.startswith(prefix) and times > 0:
                self.failures[n] = (fop, prefix, error, times - 1)
                raise error

    # --- ObjectStore -----------------------------------------------------------------------

    def download(self, uri: str, local_path: str | Path) -> Path:
        self._call("download", uri)
        if uri not in self.objects:
            raise NotFound(f"no object {uri}", provider="memory", fix="check the URI")
        dest = Path(local_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(self.objects[uri])
        return dest

    def download_tree(self, prefix_uri: str, local_dir: str | Path) -> list[Path]:
        self._call("download_tree", prefix_uri)
        found = self.under(prefix_uri)
        if not found:
            raise NotFound(f"nothing under {prefix_uri}", provider="memory", fix="check the URI")
        out = []
        for rel, data in sorted(found.items()):
            dest = Path(local_dir).joinpath(*rel.split("/"))
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            out.append(dest)
        return out

    def upload(self, local_path: str | Path, uri: str) -> str:
        self._call("upload", uri)
        src = Path(local_path)
        if not src.is_file():
            raise FileNotFoundError(f"no file {src} to upload")
        self.objects[uri] = src.read_bytes()
        return uri

    def upload_tree(self, local_dir: str | Path, prefix_uri: str) -> list[str]:
        self._call("upload_tree", prefix_uri)
        root = Path(local_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"no folder {root} to upload")
        prefix = prefix_uri.rstrip("/") + "/"
        sent = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            uri = prefix + path.relative_to(root).as_posix()
            self.objects[uri] = path.read_bytes()
            sent.append(uri)
        return sent

    def exists(self, uri: str) -> bool:
        self._call("exists", uri)
        return uri in self.objects
