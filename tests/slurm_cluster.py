"""A real Slurm cluster on this machine for the Slurm backend's tests (Debian's slurmctld, slurmd, slurmdbd).

slurmctld runs here; each compute node is its own slurmd in its own network namespace (`ip netns`), joined to
this host by a bridge, so a node has its own address and a slurmd killed with everything in its namespace is a
real node failure. GPUs are typed GRES (`gpu:t4:2`) with `AutoDetect=off` over character devices made here (the
null device's numbers: they exist, nothing opens them). munged, MariaDB and slurmdbd run here too, on private
sockets and ports, so `sacct` answers. Everything lives under one directory in /tmp (socket paths must stay
short) and the tools find it through `SLURM_CONF`; nothing of the machine's own /etc is written.

Cleanup: `stop()` kills every process the cluster started (by the PIDs in its pid files and every PID in its
namespaces), deletes the namespaces and the bridge, and removes the directory; `sweep_stale()` does the same
for clusters whose pytest process is gone (a run killed mid-way), and runs before every start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "es-slurm-"
TOOLS = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mariadb-install-db", "sbatch", "sacct", "ip")
#: (name, GPU type, GPUs, partition): two training nodes (3 slots, as the local e2e's `1x3`) and one loanable
#: (inference) server
NODES = (("n1", "t4", 2, "train"), ("n2", "t4", 1, "train"), ("n3", "t4", 2, "loan"))


def missing_tools() -> list[str]:
    return [t for t in TOOLS if _bin(t) == t]


def _bin(name: str) -> str:
    """A tool by absolute path: daemons live in /usr/sbin, which a CI's PATH may lack."""
    return shutil.which(name) or next((str(p) for d in ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
                                       if (p := Path(d, name)).exists()), name)


def _run(*cmd: str, check: bool = True, env: dict[str, str] | None = None, timeout: float = 60) -> str:
    cmd = (_bin(cmd[0]), *cmd[1:])
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def ns_pids(ns: str) -> list[int]:
    out = subprocess.run([_bin("ip"), "netns", "pids", ns], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def _teardown(root: Path, tag: str) -> None:
    """Kill what the cluster at `root` started and remove its namespaces, bridge and files."""
    for ns in [n for n in _netns() if n.startswith(tag)]:
        for _ in range(20):  # a killed slurmstepd's children may fork once more
            pids = ns_pids(ns)
            if not pids:
                break
            _kill(pids)
            time.sleep(0.1)
        subprocess.run([_bin("ip"), "netns", "delete", ns], capture_output=True)
    for d in Path("/etc/netns").glob(f"{tag}n*"):
        shutil.rmtree(d, ignore_errors=True)
    for pf in root.glob("*.pid"):
        with contextlib.suppress(ValueError, OSError):
            _kill([int(pf.read_text().split()[0])])
    subprocess.run([_bin("ip"), "link", "delete", f"{tag}br"], capture_output=True)
    time.sleep(0.2)
    shutil.rmtree(root, ignore_errors=True)


def _netns() -> list[str]:
    out = subprocess.run([_bin("ip"), "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.strip()]


def sweep_stale() -> list[str]:
    """Tear down clusters left by test processes that are gone (their owner PID is dead)."""
    swept = []
    for root in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            owner = int((root / "owner").read_text())
        except (OSError, ValueError):
            owner = 0
        if owner and _alive(owner):
            continue
        _teardown(root, root.name[len(PREFIX):].split("-")[0])
        swept.append(str(root))
    for ns in _netns():  # namespaces whose directory is gone
        m = re.fullmatch(r"es(\d+)n\d+", ns)
        if m and not _alive(int(m.group(1))):
            _teardown(Path("/nonexistent"), f"es{m.group(1)}")
    return swept


@dataclass
class SlurmCluster:
    root: Path
    tag: str
    subnet: str  # "10.251.K"
    ctl_port: int
    env: dict[str, str] = field(default_factory=dict)
    nodes: tuple[tuple[str, str, int, str], ...] = NODES

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def addr(self, node: str) -> str:
        return f"{self.subnet}.{11 + [n for n, *_ in self.nodes].index(node)}"

    def ns(self, node: str) -> str:
        return f"{self.tag}{node}"

    def tool(self, *cmd: str, check: bool = True, timeout: float = 60) -> str:
        """Run a Slurm command against this cluster."""
        return _run(*cmd, check=check, env=self.env, timeout=timeout)

    # ------------------------------------------------------------------ nodes
    def start_node(self, node: str) -> None:
        _run("ip", "netns", "exec", self.ns(node), _bin("slurmd"), "-f", str(self.conf), "-N", node, env=self.env)

    def kill_node(self, node: str) -> list[int]:
        """A node failure: SIGKILL its slurmd, its slurmstepds and every job process on it (all of its namespace)."""
        killed: list[int] = []
        for _ in range(20):
            pids = ns_pids(self.ns(node))
            if not pids:
                break
            killed += pids
            _kill(pids)
            time.sleep(0.1)
        return killed

    def node_state(self, node: str) -> str:
        return self.tool("sinfo", "-h", "-N", "-n", node, "-o", "%T").split("\n")[0].strip()

    def wait_nodes_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = self.tool("sinfo", "-h", "-N", "-o", "%N %T", check=False).split()
            if states and all(s in ("idle", "mixed", "allocated") for s in states[1::2]):
                return
            time.sleep(0.5)
        raise AssertionError(f"Slurm nodes not up after {timeout}s: {self.tool('sinfo', '-N', check=False)}\n"
                             f"{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        out = []
        for f in sorted(self.root.glob("*.log")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-n:]}")
        return "\n".join(out)

    def cancel_all(self) -> None:
        """Cancel every job (between tests) and wait until the queue is empty."""
        self.tool("scancel", "--full", "--user", "root", check=False)
        deadline = time.monotonic() + 60
        while self.tool("squeue", "-h", "-o", "%i", check=False).strip() and time.monotonic() < deadline:
            time.sleep(0.3)

    def reset(self) -> None:
        """Between tests: no job left, every node up and not drained (a test may have killed or drained one)."""
        self.cancel_all()
        for name, *_ in self.nodes:
            if not ns_pids(self.ns(name)):
                self.start_node(name)
        for name, *_ in self.nodes:
            self.tool("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)
        self.wait_nodes_idle(90)

    def stop(self) -> None:
        _teardown(self.root, self.tag)


def start_cluster(accounting: bool = True) -> SlurmCluster:
    """Start munged (+ MariaDB and slurmdbd when `accounting`), slurmctld and one slurmd per node; wait until
    every node is idle."""
    sweep_stale()
    tag = f"es{os.getpid()}"
    root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{tag}-"))
    root.chmod(0o755)  # job accounts (isolation) reach the munge socket through it
    (root / "owner").write_text(str(os.getpid()))
    k = 1 + os.getpid() % 250
    c = SlurmCluster(root, tag, f"10.251.{k}", _free_port())
    c.env = {**os.environ, "SLURM_CONF": str(c.conf)}
    try:
        _network(c)
        _munge(c)
        dbd_port = _accounting(c) if accounting else None
        _write_conf(c, dbd_port)
        _run("slurmctld", "-f", str(c.conf), env=c.env)
        for name, *_ in c.nodes:
            c.start_node(name)
        c.wait_nodes_idle(90)
    except BaseException:
        logs = c.log_tail()
        c.stop()
        raise RuntimeError(f"the test Slurm cluster did not start; its logs:\n{logs}") from None
    return c


def _network(c: SlurmCluster) -> None:
    br = f"{c.tag}br"
    _run("ip", "link", "add", br, "type", "bridge")
    _run("ip", "addr", "add", f"{c.subnet}.1/24", "dev", br)
    _run("ip", "link", "set", br, "up")
    for i, (name, *_) in enumerate(c.nodes):
        ns, host, peer = c.ns(name), f"{c.tag}h{i}", f"{c.tag}p{i}"
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
        _run("ip", "link", "set", host, "master", br)
        _run("ip", "link", "set", host, "up")
        _run("ip", "link", "set", peer, "netns", ns)
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", ns, "addr", "add", f"{c.addr(name)}/24", "dev", peer)
        _run("ip", "-n", ns, "link", "set", peer, "up")
        _run("ip", "-n", ns, "route", "add", "default", "via", f"{c.subnet}.1")
        _names(c, ns)


def _names(c: SlurmCluster, ns: str) -> None:
    """`ip netns exec` mounts /etc/netns/NS/* over /etc: the nodes' names resolve from a hosts file and no DNS
    server is asked (torch's store looks up every peer's name; an unreachable server costs seconds each)."""
    d = Path("/etc/netns") / ns
    d.mkdir(parents=True, exist_ok=True)
    hosts = ["127.0.0.1 localhost", f"{c.subnet}.1 {socket.gethostname()}",
             *(f"{c.addr(n)} {n}" for n, *_ in c.nodes)]
    (d / "hosts").write_text("\n".join(hosts) + "\n")
    (d / "resolv.conf").write_text("# no DNS inside the test cluster\noptions timeout:1 attempts:1\n")


def _munge(c: SlurmCluster) -> None:
    key = c.root / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o400)
    _run("munged", "--force", f"--socket={c.root / 'munge.sock'}", f"--key-file={key}",
         f"--pid-file={c.root / 'munged.pid'}", f"--log-file={c.root / 'munged.log'}",
         f"--seed-file={c.root / 'munge.seed'}")


def _accounting(c: SlurmCluster) -> int:
    """MariaDB on a private socket and port, and slurmdbd on another port; returns slurmdbd's port."""
    db, sock, port = c.root / "mysql", c.root / "mysql.sock", _free_port()
    _run("mariadb-install-db", "--no-defaults", f"--datadir={db}", "--user=root", "--skip-test-db",
         "--auth-root-authentication-method=normal", timeout=120)
    with open(c.root / "mariadb.log", "ab") as log:
        subprocess.Popen([_bin("mariadbd"), "--no-defaults", f"--datadir={db}", f"--socket={sock}", f"--port={port}",
                          "--bind-address=127.0.0.1", "--user=root", f"--pid-file={c.root / 'mariadb.pid'}",
                          "--innodb-buffer-pool-size=32M", "--skip-log-bin", "--innodb-log-file-size=16M"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    dbd_port = _free_port()
    conf = c.root / "slurmdbd.conf"
    conf.write_text("\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={c.root / 'munge.sock'}", "DbdHost=localhost",
        "DbdAddr=127.0.0.1", f"DbdPort={dbd_port}", "SlurmUser=root", f"PidFile={c.root / 'slurmdbd.pid'}",
        f"LogFile={c.root / 'slurmdbd.log'}", "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
        f"StoragePort={port}", "StorageUser=root", "StorageLoc=slurm_acct_db", ""]))
    conf.chmod(0o600)
    _run("slurmdbd", env={**c.env, "SLURM_CONF": str(c.conf)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", dbd_port)) == 0:
                return dbd_port
        time.sleep(0.2)
    raise RuntimeError("slurmdbd did not listen")


def _devices(c: SlurmCluster, node: str, gpus: int) -> str:
    d = c.root / "dev" / node
    d.mkdir(parents=True, exist_ok=True)
    for i in range(gpus):
        p = d / f"gpu{i}"
        if not p.exists():
            os.mknod(p, 0o666 | 0o020000, os.makedev(1, 3))  # a character device (null's numbers)
    return f"{d}/gpu[0-{gpus - 1}]"


def _write_conf(c: SlurmCluster, dbd_port: int | None) -> None:
    host = socket.gethostname().split(".")[0]
    r = c.root
    acct = (["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
             f"AccountingStoragePort={dbd_port}", f"AccountingStoragePass={r / 'munge.sock'}",
             "AccountingStorageTRES=gres/gpu,gres/gpu:t4",
             "JobAcctGatherType=jobacct_gather/linux",
             "JobAcctGatherFrequency=30"] if dbd_port else ["AccountingStorageType=accounting_storage/none"])
    lines = [
        "ClusterName=es", f"SlurmctldHost={host}({c.subnet}.1)", f"SlurmctldPort={c.ctl_port}", "SlurmdPort=6818",
        "AuthType=auth/munge", f"AuthInfo=socket={r / 'munge.sock'}", "CredType=cred/munge", "SlurmUser=root",
        "SlurmdUser=root", f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}/%n",
        f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r}/slurmd-%n.pid",
        f"SlurmctldLogFile={r / 'slurmctld.log'}", f"SlurmdLogFile={r}/slurmd-%n.log", "SlurmctldDebug=info",
        "SlurmdDebug=info", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "GresTypes=gpu",
        "SlurmdParameters=config_overrides", "SlurmdTimeout=6", "ReturnToService=2", "KillWait=10",
        "InactiveLimit=0", "MinJobAge=600", "MailProg=/bin/true", "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=1,sched_interval=2", "MessageTimeout=5", *acct,
    ]
    gres = ["AutoDetect=off"]
    for name, gtype, gpus, _part in c.nodes:
        lines.append(f"NodeName={name} NodeAddr={c.addr(name)} CPUs=8 RealMemory=4000 Gres=gpu:{gtype}:{gpus} "
                     "State=UNKNOWN")
        gres.append(f"NodeName={name} Name=gpu Type={gtype} File={_devices(c, name, gpus)}")
    for part in dict.fromkeys(p for *_, p in c.nodes):
        names = ",".join(n for n, *_, p in c.nodes if p == part)
        lines.append(f"PartitionName={part} Nodes={names} State=UP MaxTime=INFINITE"
                     f"{' Default=YES' if part == 'train' else ''}")
    (r / "state").mkdir(exist_ok=True)
    for name, *_ in c.nodes:
        (r / "spool" / name).mkdir(parents=True, exist_ok=True)
    c.conf.write_text("\n".join(lines) + "\n")
    (r / "gres.conf").write_text("\n".join(gres) + "\n")
    (r / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
