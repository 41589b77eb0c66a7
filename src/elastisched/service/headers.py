"""Security headers on every answer (issue 23 item 5): the dashboard may run only its own inline script and
style (a Content-Security-Policy naming their hashes), may not be framed, and nothing the API answers is
cached, sniffed or sent on as a referrer. An ASGI middleware of a few lines (no per-request object).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

COMMON = ((b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
          (b"referrer-policy", b"no-referrer"), (b"cross-origin-opener-policy", b"same-origin"),
          (b"cross-origin-resource-policy", b"same-origin"), (b"cache-control", b"no-store"))
API_CSP = b"default-src 'none'; frame-ancestors 'none'"


def _hashes(html: str, tag: str) -> str:
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.S)
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)


def page_csp(html: str) -> str:
    """The dashboard's policy: its inline <script> and <style> by hash, API calls to this origin, inline style
    attributes (bar widths, legend swatches), `data:` images (the empty favicon); nothing else."""
    return (f"default-src 'none'; script-src {_hashes(html, 'script')}; style-src {_hashes(html, 'style')}; "
            "style-src-attr 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")


def security_headers(app: ASGIApp, page: str) -> ASGIApp:
    """Add `COMMON` to every HTTP answer, and the dashboard's CSP to HTML ones (API_CSP to the rest)."""
    html_csp = page_csp(page).encode()

    async def wrapped(scope: Scope, receive: Callable[[], Awaitable[Message]],
                      send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_with(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                headers = list(msg.get("headers") or [])
                html = any(k == b"content-type" and v.startswith(b"text/html") for k, v in headers)
                headers += [*COMMON, (b"content-security-policy", html_csp if html else API_CSP)]
                msg = {**msg, "headers": headers}
            await send(msg)

        await app(scope, receive, send_with)

    return wrapped
