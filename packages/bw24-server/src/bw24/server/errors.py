"""OpenAI-shaped errors: every failure leaves as {"error": {"message", "type", "param", "code"}}.

FastAPI's own failures (validation, malformed JSON, unknown route) are mapped here too, so a
client never sees FastAPI's 422 detail list or an HTML page.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("bw24.server")

# Union members show up in pydantic error locations as type names ("str", "list[int]", ...);
# they are not field names, so they are dropped from the reported param.
_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "null"}


class APIError(Exception):
    """An error with an HTTP status that becomes an OpenAI error body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def unknown_model(name: str, served: list[str]) -> APIError:
    return APIError(404, f"The model '{name}' does not exist; this server serves {served}.",
                    param="model", code="model_not_found")


def not_ready() -> APIError:
    return APIError(503, "The model is still loading.", type="server_error", code="model_loading")


def _param_from_loc(loc: tuple) -> str | None:
    """('body', 'messages', 0, 'content') -> 'messages[0].content'."""
    parts: list[str] = []
    for seg in loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc:
        if isinstance(seg, int):
            if parts:
                parts[-1] += f"[{seg}]"
            continue
        seg = str(seg)
        if seg in _TYPE_TAGS or not seg.isidentifier():
            continue
        parts.append(seg)
    return ".".join(parts) or None


def validation_to_api_error(exc: RequestValidationError) -> APIError:
    errors = list(exc.errors())
    if not errors:
        return bad_request("Invalid request.", code="invalid_request")
    # An unsupported field is the most useful thing to name; then a missing one; then the first.
    for kind in ("json_invalid", "extra_forbidden", "missing"):
        hit = next((e for e in errors if e.get("type") == kind), None)
        if hit is not None:
            break
    else:  # the deepest location is the most specific (union branches report at their own depth)
        hit = max(errors, key=lambda e: len(e.get("loc", ())))
    kind = hit.get("type", "")
    param = _param_from_loc(tuple(hit.get("loc", ())))
    if kind == "json_invalid":
        ctx = hit.get("ctx") or {}
        return bad_request(f"Malformed JSON body: {ctx.get('error', hit.get('msg'))}", code="invalid_json")
    if kind == "extra_forbidden":
        return bad_request(f"Unsupported field '{param}': bw24-server does not implement it.",
                           param=param, code="unsupported_field")
    if kind == "missing":
        return bad_request(f"Missing required field '{param}'.", param=param, code="missing_field")
    if param is None:
        return bad_request(f"Invalid request body: {hit.get('msg')}", code="invalid_request")
    return bad_request(f"Invalid value for '{param}': {hit.get('msg')}", param=param)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = validation_to_api_error(exc)
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(error_body(str(exc.detail), kind, None, code), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return JSONResponse(error_body(f"Internal error: {type(exc).__name__}: {exc}", "server_error",
                                       None, "internal_error"), status_code=500)
