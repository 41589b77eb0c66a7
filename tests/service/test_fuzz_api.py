"""API fuzz suite (issue 11 item 5): a seeded corpus of malformed requests against a real uvicorn server on
loopback. Every request must come back (no hang), none with a 5xx, and every 4xx must name what was wrong
(the field, `path`, `method` or `Authorization`); the server's log must hold no traceback. Accepted
submissions must be sane (bounded, finite, storable).

The corpus mixes: submissions with one field replaced by a hostile value (NaN, ±Infinity, 1e400, integers
beyond int64, NUL, lone surrogates, control characters, 128 KB strings, wrong types, deep nesting); broken
bodies (truncated JSON, invalid UTF-8, not an object, wrong content type, over the size limit); script paths
of hostile length (a component over 255 bytes, a path over PATH_MAX, traversal: 422/403 naming `script`); job
paths with
NUL, encoded surrogates, invalid UTF-8, components over 255 characters, traversal, unknown ids; query strings
(`limit`, `state`, `follow`, `timeout_s`) out of range or malformed; resize/loan/reclaim bodies; and broken
`Authorization` headers. `ELASTISCHED_FUZZ_SEED` and `ELASTISCHED_FUZZ_N` change the seed and the count.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from _svc_helpers import FAKE, ROOT, TOKEN, ServiceProc, wait_for

SEED = int(os.environ.get("ELASTISCHED_FUZZ_SEED", "0"))
N = int(os.environ.get("ELASTISCHED_FUZZ_N", "4000"))
BUDGET_S = 80.0

# JSON fragments that no bounded field should take (or that must be refused by type).
HOSTILE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9223372036854775808", "-9223372036854775809",
           "18446744073709551616", str(10**30), "1e308", "-1", "0", "1.5", "-0.0", '"x"', '""', "true", "false",
           "[]", "{}", '"\\u0000"', '"a\\u0000b"', '"\\ud800"', '"x\\udfffy"', '"\\u001b[31m"', '"\\u007f"',
           '"' + "y" * 5000 + '"', '"' + "z" * (130 * 1024) + '"', "[1,2,3]", "[[[[[[[[1]]]]]]]]", '{"a": NaN}',
           '"NaN"', '"Infinity"', '"1_000"', '"\\u0661\\u0662"', '"\\uff11"', '"+5"', '" 5"', "1e-400", "2e9",
           '["\\u0000"]', '["\\ud800"]', '["' + "w" * (129 * 1024) + '"]', "[" + ",".join(['"a"'] * 300) + "]",
           "[" * 64 + "]" * 64, '"../../etc/passwd"', '"/etc/passwd"', '"' + "/x" * 3000 + '"']
SUBMIT_FIELDS = ["script", "args", "name", "gpus", "min_gpus", "max_gpus", "batch_size", "adaptive", "gpu_type",
                 "duration_s", "application", "work_scale"]
JOB_IDS = ["%00", "a%00b", "%ED%A0%80", "%ED%BF%BF", "%FF", "%C0%AF", "%E2%80%AE", "%7F", "%0A", "%0D%0A",
           "%20", "abc%25", "*", "..", "%2e%2e", "%2F", "%5C", "%F0%9F%92%A9", "%EF%BF%BD", "x" * 256, "y" * 1000,
           "deadbeef", "0", "ZZZZ", "a" * 33, "%u0000", "%", "%%", "%G0"]
PATH_SUFFIXES = [("GET", ""), ("DELETE", ""), ("POST", ":resize"), ("POST", ":suspend"), ("POST", ":resume"),
                 ("GET", "/logs"), ("PUT", ""), ("PATCH", "/logs")]
QUERY_VALUES = ["", "%00", "%FF", "%ED%A0%80", "NaN", "inf", "-inf", "1e999", "-1", "0", str(2**63), str(2**64),
                str(-(2**63) - 1), "1.5", "x", "true", "%0A", "a" * 5000, "RUNNING,%00", "running,nope", ",,,"]
AUTHS = ["", "Bearer", "Bearer ", "Bearer nope", "Basic dGVzdDp0ZXN0", "bearer " + TOKEN, "Bearer " + TOKEN + "x",
         "Bearer est_000000000000_" + "a" * 43, "Bearer est_zz_zz", "Bearer \xff\xfe", "Bearer " + "t" * 5000,
         "Bearer " + TOKEN + "\t"]


@dataclass
class Case:
    method: str
    path: str
    body: bytes | None = None
    ctype: str = "application/json"
    auth: str | None = None  # None: the admin token
    fields: tuple[str, ...] = ()  # a 4xx must name one of these (empty: any field-naming 4xx)


def long_paths(rng: random.Random) -> str:
    """A script path the OS refuses or that leaves the scripts directory: a component over NAME_MAX (255 bytes,
    in ASCII or in 2-byte characters), a path over PATH_MAX (4096 bytes) in under 4096 characters, a deep
    relative path, a traversal; absolute or relative to the scripts directory."""
    scripts = str(ROOT / "tests")
    part = rng.choice(["a" * rng.randint(256, 1000), "\u00e9" * rng.randint(128, 400), "\U0001f4a9" * 64,
                       "/".join(["\u00e9" * 120] * 30), "/".join(["d" * 250] * rng.randint(17, 18)),
                       "../" * rng.randint(2, 1300) + "etc/passwd", "x/" * 2000 + "y", "." * 300])
    return json.dumps(rng.choice([part, f"{scripts}/{part}", f"{scripts}/backends/{part}/fake_worker.py"]))


def corpus(rng: random.Random, n: int, done_id: str) -> Iterator[Case]:
    """`n` seeded malformed requests."""
    base = {"script": json.dumps(FAKE), "args": '["--steps", "1"]', "gpus": "1", "batch_size": "32"}
    for _ in range(n):
        k = rng.random()
        if k < 0.08:  # a script path of hostile length (issue 23 item 3)
            fields = dict(base) | {"script": long_paths(rng)}
            body = "{" + ", ".join(f'"{a}": {v}' for a, v in fields.items()) + "}"
            yield Case("POST", "/v1/jobs", body.encode(), fields=("script",))
        elif k < 0.40:  # a submission with one hostile field
            f = rng.choice(SUBMIT_FIELDS)
            fields = dict(base) | {f: rng.choice(HOSTILE)}
            body = "{" + ", ".join(f'"{a}": {v}' for a, v in fields.items()) + "}"
            yield Case("POST", "/v1/jobs", body.encode(), fields=(f, *(("gpus", "min_gpus", "max_gpus")
                                                                       if f.endswith("gpus") else ())))
        elif k < 0.48:  # a broken body
            good = '{"script": ' + json.dumps(FAKE) + ', "gpus": 1}'
            body, ctype = rng.choice([
                (good[: rng.randrange(1, len(good))].encode(), "application/json"),
                (b'{"script": "\xff\xfe"}', "application/json"), (b"\xff" * 10, "application/json"),
                (b"[]", "application/json"), (b"1", "application/json"), (b'"s"', "application/json"),
                (b"null", "application/json"), (b"", "application/json"), (good.encode(), "text/plain"),
                (b"[" * 100_000 + b"]" * 100_000, "application/json"), (b'{"script": ' * 5000, "application/json"),
                (good.encode(), "application/x-www-form-urlencoded"),
                (b"{" + b" " * (5 << 20) + b"}", "application/json") if rng.random() < 0.05 else (b"{}", "text/json")])
            yield Case("POST", "/v1/jobs", body, ctype, fields=("body", "script"))
        elif k < 0.66:  # a hostile job path
            method, suffix = rng.choice(PATH_SUFFIXES)
            jid = rng.choice([*JOB_IDS, done_id[: rng.randrange(1, 9)] + rng.choice(JOB_IDS)])
            body = b'{"gpus": 1}' if suffix == ":resize" else None
            yield Case(method, f"/v1/jobs/{jid}{suffix}", body, fields=("path", "job_id", "method"))
        elif k < 0.80:  # a hostile query
            v = rng.choice(QUERY_VALUES)
            which = rng.choice(["limit", "state", "follow", "timeout_s"])
            if which in ("limit", "state"):
                yield Case("GET", f"/v1/jobs?{which}={v}", fields=(which, "query"))
            else:
                other = "timeout_s=0.01" if which == "follow" else "follow=true"
                yield Case("GET", f"/v1/jobs/{done_id}/logs?{which}={v}&{other}", fields=(which, "query"))
        elif k < 0.92:  # resize / loan / reclaim bodies
            path, fs = rng.choice([(f"/v1/jobs/{done_id}:resize", ["gpus"]),
                                   ("/v1/loans", ["nodes", "gpus_per_node", "gpu_type"]),
                                   ("/v1/reclaims", ["count", "deadline_s"])])
            f = rng.choice(fs)
            vals = {x: '"cpu"' if x == "gpu_type" else "1" for x in fs} | {f: rng.choice(HOSTILE)}
            body = "{" + ", ".join(f'"{a}": {v}' for a, v in vals.items()) + "}"
            yield Case("POST", path, body.encode(), fields=(*fs, "job_id"))  # a valid body may fail on another
        else:  # broken Authorization
            yield Case(rng.choice(["GET", "POST"]), rng.choice(["/v1/jobs", "/v1/loans", "/metrics", "/v1/nodes"]),
                       b"{}", auth=rng.choice(AUTHS),
                       fields=("Authorization", "script", "gpus_per_node"))  # some tokens are valid


def _names(text: str, fields: tuple[str, ...]) -> bool:
    try:
        detail = json.loads(text).get("detail")
    except (ValueError, AttributeError):
        return False
    if isinstance(detail, list):
        return bool(detail) and all(isinstance(d, dict) and d.get("loc") and str(d.get("msg", "")).split(":")[0]
                                    for d in detail) and (not fields or any(f in text for f in fields))
    return isinstance(detail, str) and ":" in detail and (not fields or detail.split(":")[0] in
                                                          (*fields, "path", "method", "body", "Authorization"))


def _sane(job: dict[str, object]) -> bool:
    """What an accepted submission may look like."""
    args = job["args"]
    return (isinstance(args, list) and all(isinstance(a, str) and "\x00" not in a for a in args)
            and 1 <= int(job["requested_gpus"]) <= 4096 and 1 <= int(job["batch_size"]) <= 1 << 20  # type: ignore[call-overload]
            and job["script"] == FAKE)


def _judge(case: Case, status: int, text: str, counts: dict[str, int], failures: list[str]) -> None:
    """Count one answer and note it among `failures` if it is wrong: a 5xx, a 4xx not naming the bad field, or
    an accepted submission that makes no sense."""
    if status >= 500:
        counts["5xx"] += 1
        failures.append(f"{status} {case.method} {case.path[:80]} {(case.body or b'')[:80]!r}: {text[:200]}")
    elif 400 <= status < 500:
        counts["4xx"] += 1
        if not _names(text, case.fields):
            counts["unnamed"] += 1
            failures.append(f"{status} not naming {case.fields}: {case.method} {case.path[:60]} "
                            f"{(case.body or b'')[:60]!r}: {text[:200]}")
    else:
        counts["2xx"] += 1
        if case.path == "/v1/jobs" and case.method == "POST" and not _sane(json.loads(text)):
            counts["nonsense"] += 1
            failures.append(f"nonsense accepted: {(case.body or b'')[:120]!r} -> {text[:200]}")


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProc]:
    s = ServiceProc(tmp_path_factory.mktemp("fuzz"), cluster="2x2:cpu", scripts_dir=ROOT / "tests").start()
    yield s
    s.stop()
    s.kill_workers()


def test_fuzzed_requests_get_4xx_naming_the_field_never_5xx(svc: ServiceProc) -> None:
    done = svc.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--steps", "1"]}).json()["id"]
    wait_for(lambda: svc.job(done)["state"] == "SUCCEEDED", 30, "first job done")
    # A job holding the whole cluster: accepted fuzz submissions queue behind it (FIFO) instead of running.
    svc.api("POST", "/v1/jobs", json={"script": FAKE, "gpus": 4, "args": ["--steps", "100000", "--sleep", "1"]})
    conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
    failures: list[str] = []
    counts = {"2xx": 0, "4xx": 0, "5xx": 0, "hang": 0, "unnamed": 0, "nonsense": 0}
    t0 = time.monotonic()
    sent = 0
    for case in corpus(random.Random(SEED), N, done):
        if time.monotonic() - t0 > BUDGET_S:
            break
        headers = {"Content-Type": case.ctype}
        auth = f"Bearer {TOKEN}" if case.auth is None else case.auth
        if auth:
            headers["Authorization"] = auth
        try:
            conn.request(case.method, case.path, body=case.body, headers=headers)
            r = conn.getresponse()
            text = r.read().decode("utf-8", "replace")
            status = r.status
        except TimeoutError:
            failures.append(f"HANG {case.method} {case.path[:80]}")
            counts["hang"] += 1
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
            continue
        except (http.client.HTTPException, OSError) as e:  # the server may close after an oversized body
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
            if not isinstance(e, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)):
                failures.append(f"{type(e).__name__} {case.method} {case.path[:80]}")
            continue
        sent += 1
        if r.getheader("connection", "").lower() == "close":
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
        _judge(case, status, text, counts, failures)
    wall = time.monotonic() - t0
    conn.close()
    log = svc.log_text()
    print(json.dumps({"seed": SEED, "sent": sent, "wall_s": round(wall, 1), **counts,
                      "tracebacks": log.count("Traceback")}))
    assert not failures, f"{len(failures)} of {sent}:\n" + "\n".join(failures[:30])
    assert sent >= 2000, f"only {sent} requests in {wall:.0f} s"
    assert "Traceback" not in log and "Exception" not in log, log[-3000:]
    assert svc.api("GET", "/healthz").json()["ok"] and counts["4xx"] > 0.8 * sent


def _json_values() -> object:
    from hypothesis import strategies as st

    scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
               | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def test_hypothesis_submissions_are_accepted_sane_or_refused_by_field(svc: ServiceProc) -> None:
    """Property: any JSON value in any submit field gives a sane 201 or a 4xx naming a field (no 5xx)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(field=st.sampled_from(SUBMIT_FIELDS), value=_json_values())
    def check(field: str, value: object) -> None:
        body = {"script": FAKE, "args": ["--steps", "1"], "gpus": 1} | {field: value}
        r = svc.api("POST", "/v1/jobs", content=json.dumps(body, allow_nan=True),
                    headers={"content-type": "application/json"})
        assert r.status_code < 500, (body, r.text[:300])
        if r.status_code >= 400:
            assert _names(r.text, (field, "gpus", "min_gpus", "max_gpus", "body")), (body, r.text[:300])
        else:
            job = r.json()
            assert _sane(job), job
            svc.api("DELETE", f"/v1/jobs/{job['id']}")

    check()
    assert "Traceback" not in svc.log_text()
