"""What the API accepts (issue 11 items 2 and 5): request models with a bound on every field, and the guards
that keep malformed input from ever reaching a handler, the store or `Popen`.

Every rejection is a 4xx whose message starts with (or whose `loc` ends in) the field's name. A validation
error never echoes the input (it may be NaN, a lone surrogate or 128 KB long, none of which the response
should carry); strings are refused when they hold NUL, other control characters or lone surrogates, which
SQLite and `execve` cannot take. Argument limits are Linux's: one argument < 128 KiB (`MAX_ARG_STRLEN`), and
the whole command line well under `ARG_MAX` (2 MiB with the environment).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, ValidationInfo, field_validator

from elastisched.backends.job_env import spec_env_problem
from elastisched.service.spec_defaults import DEFAULT_BATCH_SIZE

MAX_ARG_BYTES = 128 * 1024 - 1  # execve: MAX_ARG_STRLEN (128 KiB) including the terminating NUL
MAX_ARGS_BYTES = 1 << 20  # all arguments together (ARG_MAX is 2 MiB with the environment)
MAX_BODY_BYTES = 4 << 20
MAX_PATH_COMPONENT = 255  # NAME_MAX
MAX_PATH = 2048
JOB_ID = r"^[A-Za-z0-9]{1,32}$"  # ids are hex; a unique prefix is accepted
NAME_RE = re.compile(r"^[A-Za-z0-9_.:+-]+$")
Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
                   Awaitable[None]]


def bad_char(s: str) -> str | None:
    """Why `s` cannot be stored or passed to a process (NUL, control character, lone surrogate), or None."""
    for ch in s:
        o = ord(ch)
        if o == 0:
            return "holds a NUL byte"
        if 0xD800 <= o <= 0xDFFF:
            return "holds a lone surrogate (not valid Unicode)"
        if (o < 0x20 and ch not in "\t\n\r") or o == 0x7F or (o > 0x7F and unicodedata.category(ch) == "Cc"):
            return f"holds the control character U+{o:04X}"
    return None


def _text(v: str) -> str:
    why = bad_char(v)
    if why:
        raise ValueError(why)
    return v


def _ident(v: str) -> str:
    if not NAME_RE.match(v):
        raise ValueError("must be letters, digits and _.:+- only")
    return v


def _arg(v: str) -> str:
    if "\x00" in v:
        raise ValueError("holds a NUL byte (a process argument cannot)")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in v):
        raise ValueError("holds a lone surrogate (not valid Unicode)")
    if len(v) * 4 > MAX_ARG_BYTES and len(v.encode()) > MAX_ARG_BYTES:
        raise ValueError(f"is {len(v.encode())} bytes; one argument may have at most {MAX_ARG_BYTES}")
    return v


Text = Annotated[str, AfterValidator(_text)]
Ident = Annotated[str, AfterValidator(_ident)]
Arg = Annotated[str, AfterValidator(_arg)]
Int = Annotated[int, Strict()]  # JSON numbers only: no "5", " 5", "+5", "1_000", true
Num = Annotated[float, Strict()]
Batch = Annotated[int, Strict(), Field(ge=1, le=1 << 20)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SubmitRequest(_Model):
    script: Text = Field(min_length=1, max_length=4096)
    args: list[Arg] = Field(default_factory=list, max_length=256)
    name: Text | None = Field(default=None, min_length=1, max_length=200)
    gpus: Int = Field(default=1, ge=1, le=4096, description="GPUs requested (the size an inelastic policy gives)")
    min_gpus: Int | None = Field(default=None, ge=1, le=4096)
    max_gpus: Int | None = Field(default=None, ge=1, le=4096)
    batch_size: Batch = DEFAULT_BATCH_SIZE
    adaptive: tuple[Batch, Batch] | None = Field(default=None, description="global batch bounds MIN,MAX")
    gpu_type: Ident | None = Field(default=None, min_length=1, max_length=64)
    duration_s: Num | None = Field(default=None, gt=0, le=1e8, description="estimate at the requested size")
    application: Ident | None = Field(default=None, min_length=1, max_length=64,
                                      description="profiled application (models)")
    work_scale: Num | None = Field(default=None, gt=0, le=1e6, description="job length as a multiple of the "
                                     "profiled application's run (models)")
    env: dict[str, str] = Field(default_factory=dict, description="the job's own environment variables (on top "
                                "of the service's allow-list; the launch contract's names are reserved)")

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        why = spec_env_problem(v)
        if why:
            raise ValueError(why)
        return v

    @field_validator("args")
    @classmethod
    def _args_total(cls, v: list[str]) -> list[str]:
        total = sum(len(a.encode()) + 1 for a in v)
        if total > MAX_ARGS_BYTES:
            raise ValueError(f"take {total} bytes together; at most {MAX_ARGS_BYTES}")
        return v

    @field_validator("max_gpus")
    @classmethod
    def _max_ge_min(cls, v: int | None, info: ValidationInfo) -> int | None:
        lo = info.data.get("min_gpus")
        if v is not None and lo is not None and v < lo:
            raise ValueError(f"max_gpus={v} is below min_gpus={lo}")
        return v

    @field_validator("adaptive")
    @classmethod
    def _adaptive(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and not 1 <= v[0] <= v[1]:
            raise ValueError(f"adaptive={list(v)} must be MIN,MAX with 1 <= MIN <= MAX")
        return v


class ResizeRequest(_Model):
    gpus: Int = Field(ge=1, le=4096)


class LoanRequest(_Model):
    nodes: Int = Field(default=1, ge=1, le=1024)
    gpus_per_node: Int = Field(ge=1, le=64)
    gpu_type: str = Field(default="cpu", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")


class ReclaimRequest(_Model):
    count: Int = Field(ge=1, le=1024)
    deadline_s: Num = Field(default=60.0, ge=0, le=86400)


# ------------------------------------------------------------------------------------------------ error bodies
def _safe(x: object) -> str | int:
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    s = str(x)
    return s.encode("utf-8", "backslashreplace").decode("utf-8")[:200]


async def validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """422 with `loc` (naming the field), `msg` and `type`; never the input, which may not even be JSON."""
    assert isinstance(exc, RequestValidationError)
    detail = []
    for e in exc.errors():
        loc = [_safe(x) for x in e.get("loc", ())]
        field = ".".join(str(x) for x in loc[1:]) or (str(loc[0]) if loc else "body")
        detail.append({"loc": loc, "msg": f"{field}: {_safe(e.get('msg', 'invalid'))}", "type": e.get("type")})
    return JSONResponse({"detail": detail}, status_code=422)


# ------------------------------------------------------------------------------------------------ ASGI guard
def _reject(status: int, msg: str) -> tuple[int, bytes]:
    return status, json.dumps({"detail": msg}).encode()


def check_target(path: str, query: bytes) -> tuple[int, bytes] | None:
    """A 400 for a path or query string no handler can take (NUL, control characters, invalid UTF-8, a path
    component over NAME_MAX), naming `path` or the query parameter."""
    if len(path) > MAX_PATH:
        return _reject(414, f"path: {len(path)} characters; at most {MAX_PATH}")
    why = bad_char(path) or ("holds an invalid UTF-8 sequence" if "\ufffd" in path else None)
    if why:
        return _reject(400, f"path: {why}")
    for part in path.split("/"):
        if len(part) > MAX_PATH_COMPONENT:
            return _reject(400, f"path: a component of {len(part)} characters; at most {MAX_PATH_COMPONENT}")
    if query:
        try:
            pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="strict")
        except (UnicodeDecodeError, ValueError):
            return _reject(400, "query: holds an invalid UTF-8 sequence")
        for k, v in pairs:
            why = bad_char(k) or bad_char(v)
            if why:
                return _reject(400, f"{_safe(k)}: {why}")
            if len(v) > 4096:
                return _reject(400, f"{_safe(k)}: {len(v)} characters; at most 4096")
    return None


def guard(app: ASGIApp) -> ASGIApp:
    """ASGI middleware: refuse bad targets and bodies over MAX_BODY_BYTES before routing or parsing."""

    async def wrapped(scope: Scope, receive: Callable[[], Awaitable[dict[str, Any]]],
                      send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        bad = check_target(scope.get("path", ""), scope.get("query_string", b""))
        if bad is None:
            length = dict(scope.get("headers") or []).get(b"content-length", b"0")
            if not length.isdigit() or int(length) > MAX_BODY_BYTES:
                bad = _reject(413, f"body: content-length {_safe(length.decode('latin-1'))}; at most "
                                   f"{MAX_BODY_BYTES} bytes")
        if bad is not None:
            status, body = bad
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        seen = 0

        async def limited() -> dict[str, Any]:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > MAX_BODY_BYTES:
                    raise BodyTooLarge
            return msg

        await app(scope, limited, send)

    return wrapped


class BodyTooLarge(Exception):
    """A chunked body grew past MAX_BODY_BYTES."""


async def body_too_large(_request: Request, _exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": f"body: more than {MAX_BODY_BYTES} bytes"}, status_code=413)
