"""The elastisched policy through the real service (issue 21 "Live"): a loan offered, an elastic job that grows
onto it, the loan reclaimed — and the job shrinks back to its training GPUs in a new generation at once
(cause "resize"), never waiting SUSPENDED; it then finishes with exactly its steps. Local and Ray backends."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _svc_helpers import EXAMPLE, ROOT, wait_for
from test_e2e import BATCH, N, _args, _exact, _final, _steps

BACKENDS = ["local", pytest.param("ray", marks=pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                                                  reason="ray not installed"))]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    from _ray_cluster import start_cluster

    c = start_cluster()
    yield c
    c.shutdown()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reclaim_shrinks_the_elastic_job_instead_of_evicting_it(service_factory: Any, tmp_path: Path,
                                                                     backend: str,
                                                                     request: pytest.FixtureRequest) -> None:
    extra: tuple[str, ...] = ()
    t4: dict[str, Any] = {}
    if backend == "ray":  # Ray's training t4 node has 2 slots; the loan is a loanable t4 node (2 slots)
        address = request.getfixturevalue("ray_cluster").address
        extra, t4 = ("--backend", "ray", "--ray-address", address), {"gpu_type": "t4"}
    svc = service_factory(cluster="1x1:cpu", policy="elastisched", scripts_dir=ROOT, extra=extra)
    if backend == "ray":
        from _ray_cluster import clean

        request.addfinalizer(lambda: (svc.stop(), clean(address)))
    svc.start()
    offer = svc.api("POST", "/v1/loans", json={"nodes": 1, "gpus_per_node": 2,
                                               **({"gpu_type": "t4"} if backend == "ray" else {})})
    assert offer.status_code == 201, offer.text
    loan = offer.json()[0]["node_id"]
    # elastic 1..4; its declared length (duration_s, the model-free fallback: linear speed-up) makes growth pay
    epochs, log = 150, tmp_path / "e.jsonl"
    r = svc.api("POST", "/v1/jobs", json={"script": EXAMPLE, "name": "e", "gpus": 1, "min_gpus": 1, "max_gpus": 4,
                                          "batch_size": BATCH, "duration_s": 3600, **t4,
                                          "args": _args(epochs, log)})
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    job = lambda: svc.job(jid)  # noqa: E731
    on_loan = wait_for(lambda: (j := job())["state"] == "RUNNING" and any(n == loan for n, _ in j["placement"])
                       and any(not n.startswith("loan-") for n, _ in j["placement"]) and _steps(log) and j, 120,
                       "the job training on its training GPUs and the loan")
    gen = on_loan["generation"]
    assert svc.api("POST", "/v1/reclaims", json={"count": 1, "deadline_s": 30}).status_code == 202
    wait_for(lambda: svc.api("GET", "/v1/loans").json()["loans"][0]["state"] == "RETURNED", 60, "loan returned")
    after = wait_for(lambda: (j := job())["generation"] > gen and j["state"] == "RUNNING" and j, 60,
                     "the job running again")
    assert all(not n.startswith("loan-") for n, _ in after["placement"]) and after["gpus"] < on_loan["gpus"]
    nxt = next(g for g in after["generations"] if g["generation"] == gen + 1)
    # shrunk at once, in the round that returned the loan: a job stopped to wait would come back as "resume"
    assert nxt["cause"] == "resize", nxt
    done = wait_for(lambda: (j := job())["state"] in ("SUCCEEDED", "FAILED") and j, 300, "the job to end")
    assert done["state"] == "SUCCEEDED"
    assert _final(svc, jid)["steps"] == _exact(_steps(log), epochs) == epochs * N // BATCH
