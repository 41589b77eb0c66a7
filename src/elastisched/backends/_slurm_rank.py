"""One rank of a Slurm generation: the task `srun` starts on its node, turned into a worker on the launch contract.

The batch script runs `srun PYTHON -m elastisched.backends._slurm_rank LAUNCH_FILE` over every component of
the (heterogeneous) job; Slurm numbers the tasks 0..world-1 in component order (`SLURM_PROCID`), which is the
placement's rank order. This module reads the generation's launch file (written by the service on the shared
path), takes its rank's environment, sets `LOCAL_RANK` from `SLURM_LOCALID` (Slurm's `CUDA_VISIBLE_DEVICES`
lists the node's GPUs of this job, so local rank k is device k), agrees on a rendezvous port (rank 0 takes one
free on its node and writes it next to the launch file; the others wait for it), names the network interface
its collectives use (below), sends its output to its log file and `exec`s the local backend's per-rank wrapper
(`_wrap`: exit file, SIGTERM forwarded, stop note) around `_argv` (arguments from a file). So a rank ends
exactly as it does under the local backend, and the service reads the same exit files.

Gloo binds to the address the node's own hostname resolves to, and falls back to loopback when that is not an
address of the node (Debian's `127.0.1.1 HOST` line, a hostname that names a management network, the test
cluster's namespaces): ranks on other nodes are then refused. So unless the job or the admin set
`GLOO_SOCKET_IFNAME`, a rank names the interface its route to rank 0's address (`MASTER_ADDR`) leaves by.

Stdlib only (it runs on every node before torch is imported).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import sys
import time

PORT_WAIT_S = 300.0


def rendezvous_port(port_file: str, rank: int, wait_s: float = PORT_WAIT_S) -> int:
    """Rank 0: a port free on this node, written atomically to `port_file`; other ranks: wait for that file."""
    if rank == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            port = int(s.getsockname()[1])
        tmp = f"{port_file}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(str(port))
        os.replace(tmp, port_file)
        return port
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(port_file, encoding="utf-8") as f:
                return int(f.read())
        except (OSError, ValueError):
            time.sleep(0.1)
    raise TimeoutError(f"rank 0 did not write its rendezvous port to {port_file} within {wait_s:g} s")


SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def interface_towards(addr: str) -> str | None:
    """The name of the interface this node reaches `addr` by (the kernel's route, asked by a UDP socket that
    sends nothing), or None when that cannot be told (no route, IPv6, no interface holds the address)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))
            local = s.getsockname()[0]
            for _, name in socket.if_nameindex():
                try:
                    got = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
                except OSError:  # an interface without an IPv4 address
                    continue
                if socket.inet_ntoa(got[20:24]) == local:
                    return name
    except OSError:
        return None
    return None


def rank_env(launch: dict, rank: int, port: int, slurm: dict[str, str]) -> dict[str, str]:
    """The rank's environment: the service's for this rank, Slurm's own variables, the rendezvous port, and the
    local rank Slurm gave it on its node."""
    env = {str(k): str(v) for k, v in launch["ranks"][rank]["env"].items()}
    env.update({k: v for k, v in slurm.items() if k.startswith("SLURM") or k == "CUDA_VISIBLE_DEVICES"})
    for k in launch.get("port_keys", ["MASTER_PORT"]):  # the contract's names for the port (torch's and ours)
        env[k] = str(port)
    env["LOCAL_RANK"] = slurm.get("SLURM_LOCALID", "0")
    if "GLOO_SOCKET_IFNAME" not in env and env.get("MASTER_ADDR"):
        nic = interface_towards(env["MASTER_ADDR"])
        if nic:
            env["GLOO_SOCKET_IFNAME"] = nic
    return env


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m elastisched.backends._slurm_rank LAUNCH_FILE", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        launch = json.load(f)
    rank = int(os.environ["SLURM_PROCID"])
    me = launch["ranks"][rank]
    fd = os.open(me["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    port = rendezvous_port(launch["port_file"], rank)
    env = rank_env(launch, rank, port, dict(os.environ))
    py = launch["python"]
    os.chdir(launch["cwd"])
    os.execve(py, [py, "-m", "elastisched.backends._wrap", me["exit"], "--", py, "-u", "-m",
                   "elastisched.backends._argv", launch["argv"]], env)
    return 1  # pragma: no cover - execve does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
