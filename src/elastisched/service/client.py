"""The CLI's HTTP client side: which token it sends and from where, errors that say what to do next.

A 401 names every place the client looked for a token (the `--token` flag, `$ELASTISCHED_TOKEN`, the file
`.elastisched/token` under the current directory) and how to get one, since "wrong or missing token" alone
leaves a new user guessing which of the three was used. Imports only httpx (lazily) and typer: client
commands must start fast.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import typer

DEFAULT_SERVER = "http://127.0.0.1:8470"
TOKEN_ENV = "ELASTISCHED_TOKEN"
TOKEN_FILE = Path(".elastisched") / "token"


def resolve(token: str | None) -> tuple[str, str]:
    """(token to send, where it came from: '--token', '$ELASTISCHED_TOKEN', 'the file …', or '' for none)."""
    if token:
        return token, f"${TOKEN_ENV}" if os.environ.get(TOKEN_ENV) == token else "--token"
    path = TOKEN_FILE.resolve()
    try:
        text = path.read_text().strip()
    except OSError:
        return "", ""
    return (text, f"the file {path}") if text else ("", "")


def unauthorized_hint(source: str) -> str:
    """What the client sent, where it looked, and how to get a token that works."""
    path = TOKEN_FILE.resolve()
    if source:
        sent = f"the token from {source} was refused (mistyped, revoked, or made for another service)"
    else:
        sent = f"no token was sent: no --token flag, ${TOKEN_ENV} is not set, and {path} does not exist"
    return (f"{sent}. Looked in order at: --token, ${TOKEN_ENV}, {path}. To get one: on the service's machine run "
            "`elastisched token create --user NAME --workdir WORKDIR` (WORKDIR: the service's --workdir), or use "
            "the admin token in WORKDIR/token that `elastisched serve` printed; then pass --token TOKEN or "
            f"`export {TOKEN_ENV}=TOKEN`.")


def _httpx() -> Any:
    """httpx without its own command line: its `__init__` imports `httpx._main` (click, pygments, rich.syntax:
    about a third of a client command's start) whenever click and rich are installed, and falls back to a stub
    `main` when that import fails. The block is lifted right after, so a later `import httpx._main` works."""
    if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
        sys.modules["httpx._main"] = None  # type: ignore[assignment]  # import fails: httpx uses its stub
        try:
            import httpx
        finally:
            if sys.modules.get("httpx._main", 0) is None:
                del sys.modules["httpx._main"]
    import httpx

    return httpx


def client(server: str | None, token: str | None) -> tuple[Any, str]:
    """An httpx client for the API and where its token came from."""
    httpx = _httpx()
    tok, source = resolve(token)
    return httpx.Client(base_url=server or DEFAULT_SERVER, timeout=60,
                        headers={"Authorization": f"Bearer {tok}"} if tok else {}), source


def fail(status: int, detail: Any, source: str) -> None:
    """Print the server's error (a 422's field messages joined; a 401 with where the token came from), exit 1."""
    if isinstance(detail, list):  # 422: each message starts with the field it names
        detail = "; ".join(str(d.get("msg")) for d in detail if isinstance(d, dict))
    typer.echo(f"error ({status}): {detail}", err=True)
    if status == 401:
        typer.echo(unauthorized_hint(source), err=True)
    raise typer.Exit(1)


RETRY_DELAYS_S = (0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0)  # about 28 s: a service restart fits in it


def call(server: str | None, token: str | None, method: str, path: str, *, retry: bool = False, **kw: Any) -> Any:
    """One request; JSON or text back, or a one-line error and a non-zero exit. `retry` (a request that is
    safe to repeat: a submission with its `Idempotency-Key`): a timeout or a lost connection is retried after
    `RETRY_DELAYS_S`, each attempt said on stderr."""
    httpx = _httpx()
    c, source = client(server, token)
    with c:
        for attempt, delay in enumerate((*RETRY_DELAYS_S, None) if retry else (None,), 1):
            try:
                r = c.request(method, path, **kw)
                break
            except httpx.TransportError as e:
                if delay is None:
                    typer.echo(f"error: cannot reach {server or DEFAULT_SERVER}: {e or type(e).__name__}", err=True)
                    raise typer.Exit(3) from None
                typer.echo(f"warning: {type(e).__name__} talking to {server or DEFAULT_SERVER}; retrying in "
                           f"{delay:g} s (attempt {attempt + 1} of {len(RETRY_DELAYS_S) + 1})", err=True)
                time.sleep(delay)
            except httpx.HTTPError as e:
                typer.echo(f"error: cannot reach {server or DEFAULT_SERVER}: {e}", err=True)
                raise typer.Exit(3) from None
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        fail(r.status_code, detail, source)
    ctype = r.headers.get("content-type", "")
    return r.json() if ctype.startswith("application/json") else r.text


def no_logs_message(job: dict[str, Any]) -> str:
    """Why a job printed no logs: pending (with its reason), starting, or ended without output."""
    from elastisched.service.reasons import describe_reason

    who, state = f"job {job['id']} ({job['name']})", job["state"]
    if state == "PENDING":
        return f"{who} is pending, so it has no logs yet. Why it waits: {describe_reason(job.get('reason'))}"
    if state == "SUSPENDED":
        return f"{who} is suspended and not running. Why: {describe_reason(job.get('reason'))}"
    if state in ("STARTING", "RUNNING", "RESIZING"):
        return f"{who} is {state.lower()}; it has printed nothing yet (`elastisched logs {job['id']} -f` follows)"
    return f"{who} ended ({state}) without printing anything" + (f": {job['message']}" if job.get("message") else "")
