"""The dashboard in headless Chromium against a real service (issue 15 item 6 and its must-show).

One service (`1x2:cpu`, fifo) holds a finished job, a running job on both slots and a job that waits for them
(fifo's reason: Resources), plus one job of another user. The page must show the pending job's requested GPUs
and its reason with the sentence that explains it, hide finished jobs until asked, open a job's detail view with
its generations and its logs (refreshed while it runs), draw the utilisation history from /v1/utilisation,
show only a user's own jobs (and no loans) to that user, and log no console error. Screenshots go to
$ELASTISCHED_SCREENSHOTS (default results/screenshots).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _svc_helpers import FAKE, TOKEN, ServiceProc, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from rendering import CHROMIUM_ARGS, chromium

from elastisched.service.reasons import EXPLAIN


def _submit(client: Any, steps: int, gpus: int, name: str, lo: int | None = None) -> str:
    body = {"script": FAKE, "args": ["--steps", str(steps), "--sleep", "0.1"], "gpus": gpus, "name": name,
            "min_gpus": lo or gpus, "max_gpus": gpus}
    r = client.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from elastisched.service.auth import create_token
    from elastisched.service.store import Store

    tmp = tmp_path_factory.mktemp("dash")
    svc = ServiceProc(tmp, cluster="1x2:cpu", policy="fifo").start()
    try:
        assert svc.client is not None
        done = _submit(svc.client, 2, 1, "short")
        wait_for(lambda: svc.job(done)["state"] == "SUCCEEDED", 60, "the short job to finish")
        run = _submit(svc.client, 3000, 2, "long")  # 300 s: runs through the whole test
        wait_for(lambda: svc.job(run)["state"] == "RUNNING", 60, "the long job to run")
        wait_for(lambda: "start" in svc.api("GET", f"/v1/jobs/{run}/logs").text, 30, "the long job's first output")
        wait = _submit(svc.client, 5, 2, "waiting", lo=1)
        wait_for(lambda: svc.job(wait)["reason"], 30, "a pending reason")
        store = Store(svc.db)
        try:
            _, alice = create_token(store, "alice")
        finally:
            store.close()
        with svc.as_user(alice) as c:
            hers = _submit(c, 5, 2, "alices")
        wait_for(lambda: svc.job(hers)["reason"], 30, "alice's pending reason")
        yield {"svc": svc, "done": done, "run": run, "wait": wait, "alice": alice, "hers": hers}
    finally:
        svc.stop()
        svc.kill_workers()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("playwright is not installed (dev extra)")
        pytest.skip("playwright is not installed")
    exe = chromium()
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


SHOTS = Path(os.environ.get("ELASTISCHED_SCREENSHOTS", "results/screenshots"))


def _open(browser: Any, url: str, token: str, errors: list[str]) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page: {e}"))
    page.on("response", lambda r: errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
    page.goto(f"{url}/#token={token}")
    page.wait_for_selector("tr.job", timeout=20_000)
    return page


def test_pending_job_shows_requested_gpus_and_explained_reason(cluster: dict[str, Any], browser: Any) -> None:
    svc, errors = cluster["svc"], []
    page = _open(browser, svc.url, TOKEN, errors)
    assert "#token" not in page.url  # the token leaves the address bar
    row = page.locator(f'tr.job[data-id="{cluster["wait"]}"]')
    cells = row.locator("td").all_inner_texts()
    assert cells[3] == "PENDING", cells  # id, name, owner, state, GPUs, placed on, ...
    assert cells[4].startswith("0 of 2") and "(1–2)" in cells[4], cells  # holds 0, asked 2, elastic 1–2
    assert cells[5] == "not placed", cells
    reason = svc.job(cluster["wait"])["reason"]
    assert reason == "Resources"
    assert cells[-1] == f"{reason}: {EXPLAIN[reason]}", cells
    run = page.locator(f'tr.job[data-id="{cluster["run"]}"]').locator("td").all_inner_texts()
    assert run[3] == "RUNNING" and run[4].startswith("2 of 2") and run[5] == "cpu-0×2", run
    # finished jobs: hidden by default, shown on request (and the choice is remembered)
    assert page.locator(f'tr.job[data-id="{cluster["done"]}"]').count() == 0
    assert "1 finished hidden" in page.locator("#hidden-count").inner_text()
    page.check("#show-finished")
    page.wait_for_selector(f'tr.job[data-id="{cluster["done"]}"]', timeout=5_000)
    sched = page.locator("#sched").inner_text()
    assert "scheduler (fifo policy) last ran" in sched and "runs when a job or node changes" in sched, sched
    assert "decisions changed the plan" in sched and "rounds" not in sched, sched
    assert not page.locator("#mine-legend").is_visible()  # an admin's chart has no "your jobs" line
    assert page.locator("#loans-section").is_visible()  # an admin sees loans
    page.screenshot(path=str(_shot("dashboard-jobs")), full_page=True)
    page.uncheck("#show-finished")
    page.close()
    assert not errors, errors


def test_job_detail_shows_spec_generations_and_refreshing_logs(cluster: dict[str, Any], browser: Any) -> None:
    svc, errors = cluster["svc"], []
    page = _open(browser, svc.url, TOKEN, errors)
    page.click(f'tr.job[data-id="{cluster["run"]}"]')
    page.wait_for_selector("#detail:not([hidden]) #gens td", timeout=10_000)
    assert cluster["run"] in page.locator("#detail-title").inner_text()
    assert FAKE in page.locator("#spec").inner_text()
    gens = page.locator("#gens tr").nth(1).locator("td").all_inner_texts()
    assert gens[0] == "1" and gens[1] == "launch" and gens[2] == "cpu-0×2" and gens[3] == "RUNNING", gens
    # locator waits, not wait_for_function: the page's CSP forbids the eval that one needs
    page.locator("#logs", has_text='"start": true').wait_for(timeout=10_000)
    logs = page.locator("#logs").inner_text()
    assert "generation 1, rank 0" in logs and "generation 1, rank 1" in logs, logs[:500]
    page.screenshot(path=str(_shot("dashboard-detail")), full_page=True)
    # a pending job's detail says why it waits, in place of logs
    page.click(f'tr.job[data-id="{cluster["wait"]}"]')
    page.locator("#logs", has_text="pending").wait_for(timeout=10_000)
    assert EXPLAIN["Resources"] in page.locator("#logs").inner_text()
    assert EXPLAIN["Resources"] in page.locator("#spec").inner_text()
    assert page.url.endswith(f"#job={cluster['wait']}")
    page.close()
    link = browser.new_page()  # a link to a job's detail, with the token: the token leaves, the job stays
    link.goto(f"{svc.url}/#token={TOKEN}&job={cluster['run']}")
    link.wait_for_selector("#detail:not([hidden]) #gens td", timeout=10_000)
    assert cluster["run"] in link.locator("#detail-title").inner_text() and "token" not in link.url
    link.close()
    assert not errors, errors


def test_utilisation_history_is_drawn_from_the_store(cluster: dict[str, Any], browser: Any) -> None:
    svc, errors = cluster["svc"], []
    u = svc.api("GET", "/v1/utilisation", params={"window_s": 3600, "buckets": 60}).json()
    assert u["busy_now"] == 2 and u["total_now"] == 2, u
    assert len(u["busy"]) == len(u["total"]) == len(u["t"]) == 60
    assert all(t == pytest.approx(2.0) for t in u["total"]) and max(u["busy"]) > 0
    assert 0 < u["utilisation"] <= 1 and u["busy_gpu_s"] <= u["total_gpu_s"]
    page = _open(browser, svc.url, TOKEN, errors)
    page.wait_for_selector("#util-busy", timeout=10_000)
    pts = page.locator("#util-busy").get_attribute("points") or ""
    ys = [float(p.split(",")[1]) for p in pts.split()]
    assert min(ys) < max(ys), "the busy area has no height"
    assert page.locator("#util-total").count() == 1
    assert "now 2 of 2 GPUs" in page.locator("#util-caption").inner_text()
    page.locator("#util").screenshot(path=str(_shot("dashboard-utilisation")))
    page.close()
    assert not errors, errors


def test_a_user_sees_only_own_jobs_and_no_loans(cluster: dict[str, Any], browser: Any) -> None:
    svc, errors = cluster["svc"], []
    page = _open(browser, svc.url, cluster["alice"], errors)
    ids = [page.locator("tr.job").nth(i).get_attribute("data-id") for i in range(page.locator("tr.job").count())]
    assert ids == [cluster["hers"]], ids
    assert "signed in as alice" in page.locator("#who").inner_text()
    assert not page.locator("#loans-section").is_visible()
    page.wait_for_selector("#util-mine", state="attached", timeout=10_000)  # a user's chart adds its own busy GPUs
    assert page.locator("#mine-legend").is_visible()
    assert page.locator("#summary").inner_text().startswith("cluster: 2 of 2 GPUs allocated · your jobs: 0 running")
    page.screenshot(path=str(_shot("dashboard-user")), full_page=True)
    page.close()
    assert not errors, errors
    with svc.as_user(cluster["alice"]) as c:  # the new read-only endpoints keep the API's rules
        assert c.get(f"/v1/jobs/{cluster['run']}/log-tail").status_code == 404  # another user's job
        assert c.get(f"/v1/jobs/{cluster['hers']}/log-tail").json()["reason"] == "Priority"
        assert c.get("/v1/utilisation", params={"buckets": 0}).status_code == 422
    import httpx

    with httpx.Client(base_url=svc.url, timeout=10) as anon:
        for path in ("/v1/utilisation", "/v1/scheduler", "/v1/reasons", f"/v1/jobs/{cluster['hers']}/log-tail"):
            assert anon.get(path).status_code == 401, path


def _shot(name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS / f"{name}.png"


# ---------------------------------------------------------------- the history's arithmetic, on a real store

def test_bucket_means_are_exact_time_weighted_means() -> None:
    from elastisched.service.dashapi import bucket_means

    assert bucket_means([(5.0, 15.0, 2.0)], 0.0, 20.0, 2) == [1.0, 1.0]
    assert bucket_means([(-5.0, 100.0, 3.0), (0.0, 1.0, 4.0)], 0.0, 10.0, 10) == [7.0] + [3.0] * 9
    assert bucket_means([(2.0, 2.0, 5.0), (30.0, 40.0, 1.0)], 0.0, 10.0, 5) == [0.0] * 5


def test_utilisation_from_generations_and_loans(tmp_path: Path) -> None:
    from elastisched.service.dashapi import utilisation
    from elastisched.service.store import Store

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        a = store.create_job(name="a", script="x", args=[], spec={"num_gpus": 2}, now=1000.0, owner="alice")["id"]
        b = store.create_job(name="b", script="x", args=[], spec={"num_gpus": 1}, now=1001.0, owner="bob")["id"]
        with store.tx() as c:
            store.add_generation(c, a, 1, cause="launch", placement=[["cpu-0", 2]])
            store.add_generation(c, a, 2, cause="resize", placement=[["cpu-0", 2], ["cpu-1", 2]])
            store.add_generation(c, b, 1, cause="launch", placement=[["cpu-1", 1]])
            store.add_generation(c, b, 2, cause="retry", placement=[["cpu-1", 1]])
        store.update_generation(a, 1, state="EXITED", started_at=1010.0, ended_at=1030.0)
        store.update_generation(a, 2, state="RUNNING", started_at=1040.0)
        store.update_generation(b, 1, state="EXITED", started_at=1002.0)  # end unknown (crash): not counted
        # b's generation 2 was planned but never started: not counted either
        store.add_loans([("loan-cpu-0", "cpu", 2)])
        store.update_loan("loan-cpu-0", state="RETURNED", offered_at=1050.0, returned_at=1070.0)
        u = utilisation(store, 4, now=1100.0, window_s=3600.0, buckets=10, owner="bob")
        assert u["start"] == 1000.0 and u["bucket_s"] == 10.0  # the service is younger than the window
        assert u["busy"] == [0, 2, 2, 0, 4, 4, 4, 4, 4, 4]
        assert u["total"] == [4, 4, 4, 4, 4, 6, 6, 4, 4, 4]
        assert u["mine"] == [0] * 10  # bob's only run has no known end
        assert (u["busy_now"], u["total_now"]) == (4, 4)
        assert (u["busy_gpu_s"], u["total_gpu_s"]) == (280.0, 440.0)
        assert u["utilisation"] == pytest.approx(280 / 440)
        w = utilisation(store, 4, now=1100.0, window_s=50.0, buckets=5)
        assert w["start"] == 1050.0 and w["busy"] == [4] * 5 and w["total"] == [6, 6, 4, 4, 4] and "mine" not in w
    finally:
        store.close()


def test_every_pending_reason_has_a_sentence() -> None:
    from elastisched.core.types import PendingReason

    assert set(EXPLAIN) == set(PendingReason)
    assert all(len(EXPLAIN[r]) > 20 and not EXPLAIN[r].endswith(".") for r in PendingReason)


@pytest.mark.parametrize(("path", "field"), [
    ("/v1/utilisation?window_s=nan", "window_s"), ("/v1/utilisation?window_s=inf", "window_s"),
    ("/v1/utilisation?window_s=-1", "window_s"), ("/v1/utilisation?window_s=1e9", "window_s"),
    ("/v1/utilisation?buckets=2001", "buckets"), ("/v1/utilisation?buckets=1.5", "buckets"),
    ("/v1/jobs/JOB/log-tail?bytes=0", "bytes"), ("/v1/jobs/JOB/log-tail?bytes=abc", "bytes"),
    ("/v1/jobs/JOB/log-tail?bytes=2000000", "bytes"),
])
def test_bad_queries_of_the_dashboard_endpoints_name_the_field(cluster: dict[str, Any], path: str,
                                                                field: str) -> None:
    r = cluster["svc"].api("GET", path.replace("JOB", cluster["run"]))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail[0]["loc"][-1] == field and detail[0]["msg"].startswith(field), detail
    assert "Traceback" not in cluster["svc"].log_text()
