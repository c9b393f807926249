"""One real bw24-server (CPU backend, smollm2-135m) shared by the whole test session.

It runs as a subprocess exactly as a user starts it (`python -m bw24.server.cli ...`), with an
API key so the 401 cases are checked against the same server, and a 512-token context.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from bw24.server.launch import free_port, start_server

MODEL = "smollm2-135m"
API_KEY = "test-key-123"


@pytest.fixture(scope="session")
def server():
    srv = start_server(MODEL, "--backend", "cpu", "--ctx", "512", "--log-level", "warning", api_key=API_KEY)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def port():
    return free_port


@pytest.fixture(scope="session")
def serve_in_thread():
    """`with serve_in_thread(app) as url:` runs an app made in the test process (a custom loader, a
    monkeypatched engine) on a free port in a uvicorn thread, stopping it afterwards."""

    @contextmanager
    def serve(app):
        port = free_port()
        srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        th = threading.Thread(target=srv.run, daemon=True)
        th.start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            srv.should_exit = True
            th.join(20)

    return serve


@pytest.fixture(scope="session")
def engine():
    """The same model in the test process: the oracle for greedy output and token counts."""
    from bw24.engine import Engine
    return Engine.load(MODEL, backend="cpu", progress=False)


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server.url, headers=server.headers(), timeout=120) as c:
        yield c
