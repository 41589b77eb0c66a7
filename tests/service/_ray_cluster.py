"""A real multi-node Ray cluster on this machine for the Ray backend's tests (`ray.cluster_utils.Cluster`).

Head (no `gpu_<type>` resource: it hosts the GCS, no workers) + training nodes with different GPU types +
one node labelled `pool=loanable`. CPU slots stand in for GPUs (the custom resources are counters). Each
node is its own raylet, so removing one is a real node failure: its actors and their workers die.
The test process is never a Ray driver: the service under test connects to the cluster's address.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

MB = 2**20
TRAIN = [{"gpu_t4": 2}, {"gpu_v100": 1}, {"gpu_k80": 1}]  # three GPU types, one 2-slot type for 2-worker jobs
LOANABLE = {"gpu_t4": 2}


def start_cluster(train: list[dict[str, float]] | None = None, loanable: dict[str, float] | None = None) -> Any:
    """Start and wait for the cluster; `cluster.address` is what `--ray-address` takes."""
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    small = {"object_store_memory": 80 * MB, "num_cpus": 1}
    # a node killed without warning is declared dead after ~3 missed 1 s health checks (Ray's default: 5 × 3 s)
    fast = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3, "health_check_timeout_ms": 1000}
    c = Cluster(initialize_head=True, head_node_args={**small, "num_cpus": 0, "include_dashboard": False,
                                                      "_system_config": fast})
    c.workers = []  # type: ignore[attr-defined]
    for res in TRAIN if train is None else train:
        c.workers.append(c.add_node(**small, resources=res, labels={"pool": "train"}))
    if loanable is not False:
        c.workers.append(c.add_node(**small, resources=loanable or LOANABLE, labels={"pool": "loanable"}))
    c.wait_for_nodes()
    return c


def clean(address: str) -> str:
    """Kill every detached actor and remove every placement group the backend left (between tests), until every
    `gpu_*` unit is free again; fail the teardown when that does not happen within 60 s (a leak that would
    otherwise starve the next test of its nodes and fail it far from the cause). Call it after the service
    under test stopped: a live service relaunches what this kills."""
    code = (
        "import ray, sys, time\n"
        "from ray.util.placement_group import placement_group_table, remove_placement_group, PlacementGroup\n"
        "from ray._raylet import PlacementGroupID\n"
        f"ray.init(address={address!r}, namespace='elastisched', log_to_driver=False, logging_level='ERROR')\n"
        "n, deadline = 0, time.monotonic() + 60\n"
        "while True:\n"  # removal is asynchronous: wait until every gpu_* unit is free again
        "    for a in ray.util.list_named_actors(all_namespaces=True):\n"
        "        try:\n"
        "            ray.kill(ray.get_actor(a['name'], namespace=a['namespace'])); n += 1\n"
        "        except ValueError:\n"  # gone since the listing
        "            pass\n"
        "    for pid, pg in placement_group_table().items():\n"
        "        if pg['state'] != 'REMOVED':\n"
        "            remove_placement_group(PlacementGroup(PlacementGroupID.from_hex(pid))); n += 1\n"
        "    tot, av = ray.cluster_resources(), ray.available_resources()\n"
        "    busy = {k: (av.get(k, 0), v) for k, v in tot.items() if k.startswith('gpu_') and av.get(k, 0) < v}\n"
        "    if not busy:\n"
        "        break\n"
        "    if time.monotonic() > deadline:\n"
        "        sys.exit(f'gpu_* units still taken 60 s after cleaning (available, total): {busy}')\n"
        "    time.sleep(0.5)\n"
        "print(n)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"cleaning the Ray cluster failed: {out.stderr[-2000:]}")
    return out.stdout.strip()
