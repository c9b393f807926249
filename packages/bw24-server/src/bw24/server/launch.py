"""Start a real bw24-server in a subprocess (used by the tests and the load benchmark)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    api_key: str | None = None
    log_path: str = ""
    statuses: list[int] = field(default_factory=list)   # /health answers seen while starting

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.log_path)


def start_server(model: str, *args: str, api_key: str | None = None, timeout: float = 300.0) -> Server:
    """`python -m bw24.server.cli --model MODEL ARGS` on a free port; returns once /health is 200."""
    port = free_port()
    cmd = [sys.executable, "-m", "bw24.server.cli", "--model", model, "--port", str(port), *args]
    if api_key:
        cmd += ["--api-key", api_key]
    # A file, not a pipe: a pipe nobody reads would block the server once full.
    log = tempfile.NamedTemporaryFile(prefix="bw24-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
    log.close()
    srv = Server(f"http://127.0.0.1:{port}", proc, api_key, log.name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"bw24-server exited {proc.returncode}:\n{srv.log()}")
        try:
            r = httpx.get(srv.url + "/health", timeout=5)
            srv.statuses.append(r.status_code)
            if r.status_code == 200:
                return srv
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    tail = srv.log()[-4000:]
    srv.stop()
    raise RuntimeError(f"bw24-server did not become ready in {timeout} s:\n{tail}")
