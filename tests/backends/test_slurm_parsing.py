"""The Slurm backend's pure parts, without a cluster: what it reads from scontrol and squeue, the sbatch command
and batch script it builds, the `--slurm` options, and the rank shim's port and environment."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from elastisched.backends._slurm_cli import parse_jobs, parse_nodes
from elastisched.backends._slurm_launch import SlurmOptions, batch_script, components, sbatch_args
from elastisched.backends._slurm_loans import _names
from elastisched.backends._slurm_rank import interface_towards, rank_env, rendezvous_port
from elastisched.backends.identity import Account
from elastisched.backends.slurm import _log_order
from elastisched.core.enums import Cause
from elastisched.core.events import LaunchSpec
from elastisched.core.types import Allocation

SCONTROL = """NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 Gres=gpu:t4:2 NodeAddr=10.0.0.11 State=MIXED Partitions=train BootTime=x
NodeName=n2 Gres=gpu:A100:4(S:0-1) NodeAddr=10.0.0.12 State=DOWN+NOT_RESPONDING Partitions=train,debug Reason=Not responding [slurm@2026]
NodeName=n3 Gres=gpu:t4:2,nic:1 NodeAddr=10.0.0.13 State=IDLE+DRAIN Partitions=loan
NodeName=c1 Gres=(null) NodeAddr=10.0.0.20 State=IDLE Partitions=cpu
"""  # noqa: E501


def test_nodes_with_a_typed_gpu_gres_and_their_states() -> None:
    nodes = {n.name: n for n in parse_nodes(SCONTROL)}
    assert sorted(nodes) == ["n1", "n2", "n3"]  # c1 has no GPU GRES
    assert (nodes["n1"].gpu_type, nodes["n1"].num_gpus, nodes["n1"].addr) == ("t4", 2, "10.0.0.11")
    assert (nodes["n2"].gpu_type, nodes["n2"].num_gpus, nodes["n2"].partitions) == ("a100", 4, ("train", "debug"))
    assert nodes["n2"].dead and not nodes["n1"].dead and not nodes["n3"].dead
    assert nodes["n3"].drained and not nodes["n1"].drained


def test_jobs_by_name_only_ours() -> None:
    text = "7|es-abc|RUNNING|n1|None\n8|es-abc|RUNNING|n3|None\n9|other|PENDING||Resources\n10|es-def|NODE_FAIL|n2|x\n"
    jobs = parse_jobs(text, "es-")
    assert sorted(jobs) == ["es-abc", "es-def"]
    assert [j.job_id for j in jobs["es-abc"]] == ["7", "8"] and jobs["es-def"][0].state == "NODE_FAIL"


def _spec(gen: int = 3) -> LaunchSpec:
    return LaunchSpec("/s/train.py", ("--x",), gen, Cause.LAUNCH, "tok123")


def test_one_component_per_node_in_placement_order_with_its_partition() -> None:
    nodes = {n.name: n for n in parse_nodes(SCONTROL)}
    opts = SlurmOptions(partition="train", loan_partition="loan", account="lab", extra=("--time=1-0",))
    comps = components(Allocation(placement=(("n3", 2), ("n1", 1))), nodes, opts)
    assert comps[0][:5] == ["--nodelist=n3", "--nodes=1", "--ntasks=2", "--gres=gpu:t4:2", "--cpus-per-task=1"]
    assert "--partition=loan" in comps[0] and "--partition=train" in comps[1]
    assert "--account=lab" in comps[1] and comps[1][-1] == "--time=1-0"
    args = sbatch_args("j1", _spec(), comps, Path("/shared/jobs/j1"), Account("es-a", 1234, 1234))
    assert args.count(":") == 1 and "--job-name=es-tok123" in args and "--uid=1234" in args
    assert args.index(":") > args.index("--nodelist=n3") and args[args.index(":") + 1] == "--nodelist=n1"
    assert "--export=NONE" in args and "--output=/shared/jobs/j1/logs/slurm-g3.out" in args
    with pytest.raises(RuntimeError, match="not a GPU node"):
        components(Allocation(placement=(("zz", 1),)), nodes, opts)


def test_batch_script_runs_one_srun_over_every_component() -> None:
    two = batch_script("/py", Path("/j/g1.launch.json"), 2, {"PYTHONPATH": "/p q"})
    assert "export PYTHONPATH='/p q'\n" in two and "--het-group=0-1" in two and two.startswith("#!/bin/sh")
    assert "exec srun" in two and "elastisched.backends._slurm_rank /j/g1.launch.json" in two
    assert "--het-group" not in batch_script("/py", Path("/j/l.json"), 1, {})


def test_slurm_options() -> None:
    o = SlurmOptions.parse(["partition=gpu", "loan-partition=inf", "shared=/nfs/es", "arg=--qos=high",
                            "arg=--time=2-0", "cpus-per-gpu=4"])
    assert (o.partition, o.loan_partition, o.shared, o.extra, o.cpus_per_gpu) == (
        "gpu", "inf", "/nfs/es", ("--qos=high", "--time=2-0"), 4)
    for bad, why in (("partition", "KEY=VALUE"), ("colour=red", "unknown key"), ("cpus-per-gpu=0", "1 to 1024")):
        with pytest.raises(ValueError, match=why):
            SlurmOptions.parse([bad])


def test_node_lists_and_log_order() -> None:
    assert _names("n1,n3") == ["n1", "n3"]
    assert _names("gpu[01-03,07],cpu1") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]
    logs = [Path(p) for p in ("slurm-g2.out", "g2-r1.log", "g10-r0.log", "g2-r0.log", "slurm-g10.out")]
    assert [p.name for p in sorted(logs, key=_log_order)] == ["g2-r0.log", "g2-r1.log", "slurm-g2.out",
                                                               "g10-r0.log", "slurm-g10.out"]


def test_rank_zero_publishes_a_port_the_others_wait_for(tmp_path: Path) -> None:
    f = str(tmp_path / "g1.port")
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(rendezvous_port(f, 1, wait_s=10)))
    t.start()
    p0 = rendezvous_port(f, 0)
    t.join(10)
    assert got == [p0] and 0 < p0 < 65536
    with pytest.raises(TimeoutError, match="rank 0 did not write"):
        rendezvous_port(str(tmp_path / "none.port"), 2, wait_s=0.2)


def test_rank_env_takes_slurms_local_rank_and_devices() -> None:
    launch = {"ranks": [{"env": {"RANK": "0"}}, {"env": {"RANK": "1", "MASTER_PORT": "0"}}],
              "port_keys": ["MASTER_PORT", "ELASTISCHED_MASTER_PORT"]}
    env = rank_env(launch, 1, 4242, {"SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_ID": "9",
                                     "HOME": "/root"})
    assert env == {"RANK": "1", "MASTER_PORT": "4242", "ELASTISCHED_MASTER_PORT": "4242", "LOCAL_RANK": "1",
                   "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "9"}  # nothing else leaks


def test_a_rank_names_the_interface_towards_rank_0_for_gloo() -> None:
    """Gloo would fall back to loopback where the hostname is not a local address; the rank names the interface
    its route to MASTER_ADDR leaves by (here loopback's own), unless the job set one."""
    launch = {"ranks": [{"env": {"RANK": "0", "MASTER_ADDR": "127.0.0.1"}},
                        {"env": {"RANK": "1", "MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "ib0"}}]}
    assert rank_env(launch, 0, 1, {})["GLOO_SOCKET_IFNAME"] == "lo"
    assert rank_env(launch, 1, 1, {})["GLOO_SOCKET_IFNAME"] == "ib0"
    assert interface_towards("not an address") is None


class _Cli:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def set_node(self, node: str, state: str, reason: str = "") -> None:
        self.calls.append((node, state))


def test_a_returned_server_is_drained_then_resumed_once_empty() -> None:
    from elastisched.backends._slurm_cli import SlurmJob
    from elastisched.backends._slurm_loans import LoanDrains

    cli = _Cli()
    d = LoanDrains(cli)  # type: ignore[arg-type]
    d.lent({"n3"}, {"n3", "n4"})
    d.lent(set(), {"n3", "n4"}, {"n9"})  # n3 went back; n9 was drained by us before a restart
    assert cli.calls == [("n3", "DRAIN")] and set(d.waiting) == {"n3", "n9"}
    d.settle({"es-a": [SlurmJob("5", "es-a", "COMPLETING", "n3", "")]})  # our job still leaving n3
    assert cli.calls == [("n3", "DRAIN"), ("n9", "RESUME")]
    d.settle({})
    assert cli.calls[-1] == ("n3", "RESUME") and not d.waiting
    d.lent({"n4"}, {"n3", "n4"})
    d.lent(set(), {"n3", "n4"})
    d.lent({"n4"}, {"n3", "n4"})  # lent again before it emptied: resumed at once
    assert cli.calls[-2:] == [("n4", "DRAIN"), ("n4", "RESUME")] and not d.waiting
