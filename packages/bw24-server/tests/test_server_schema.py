"""schemathesis against /openapi.json: no 5xx, and every response conforms to the documented schema
(status codes, content types, JSON bodies and SSE events), for valid and invalid generated requests.

Generation requests are bounded (max_tokens <= 1, the served model name) so the run stays short on
the CPU engine; the 404 path of `model` is covered in test_server_errors.py.
"""

from __future__ import annotations

import datetime

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

MODEL = "smollm2-135m"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 6   # per operation and mode


def bound(case) -> None:
    body = case.body
    if not isinstance(body, dict) or case.path not in ("/v1/chat/completions", "/v1/completions"):
        return
    body["model"] = MODEL
    for k in ("max_tokens", "max_completion_tokens"):
        if isinstance(body.get(k), int) and not isinstance(body.get(k), bool):
            body[k] = max(min(body[k], 1), -1)
    if "max_tokens" not in body and "max_completion_tokens" not in body:
        body["max_tokens"] = 1
    if isinstance(body.get("prompt"), list):
        body["prompt"] = body["prompt"][:64]


@pytest.fixture(scope="module")
def api(server):
    return schemathesis.openapi.from_url(server.url + "/openapi.json")


# pytest-9 + schemathesis' own pytest plugin (from_fixture) do not agree on node ids, so the
# operations are driven through Hypothesis directly.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_conforms(api, server, mode):
    ops = [r.ok() for r in api.get_all_operations()]
    assert {o.label for o in ops} >= {"POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models"}
    for op in ops:
        if mode == GenerationMode.NEGATIVE and op.method.upper() != "POST":
            continue   # nothing to make invalid in a GET without parameters

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            bound(case)
            case.call_and_validate(base_url=server.url, headers=server.headers(), checks=CHECKS, timeout=120)

        run()


def test_schema_check_catches_a_nonconforming_response(api, http):
    # Canary: the same checks must reject a response that breaks the documented schema.
    case = api["/v1/models"]["GET"].Case()
    good = http.get("/v1/models")
    case.validate_response(good, checks=CHECKS)
    bad = httpx.Response(200, json={"object": "list", "data": [{"id": 5}]}, request=good.request)
    bad.elapsed = datetime.timedelta(0)
    with pytest.raises(FailureGroup, match="violates schema"):
        case.validate_response(bad, checks=CHECKS)
