"""Loader for the profile format released with JABAS / IIDP (values, not models).

The released profilers write one directory tree per model [code: JABAS `examples/resnet50/quickstart/`,
IIDP `iidp/profiler/*`]::

    cluster_comp_profile_data/<LBS>/<node>/<model>_<LBS>_<m>_comp_profile.json   ms per iteration
    cluster_mem_profile_data/<LBS>/<node>/max_memory_profile_info.json          max VSWs per GPU
    comm_profile_data/{intra,inter}_comm_profile_data.txt                       "ideal_ms,measured_ms"
    bucket_profile_data/<model>_bucket_size_profile.json                       DDP bucket sizes (MB)

Profiles are keyed by GPU type (the ``gpu_type`` field of the JSON), not by node name, so any server of
a profiled type can use them (the release keys them by node name and requires every node to have its own
directory; keying by type is our reading, identical for the released data where node0 = V100 and
node1 = P100).  The ResNet-50 data (Apache-2.0, unist-ssl/JABAS @ b15fd5e) is bundled as package data
under ``models/profiles/jabas`` (see its NOTICE) and read with :mod:`importlib.resources`.

GPU types without a measured profile (the 9-node example cluster has 6 of them) can be derived with
:func:`derive_gpu_type`: compute times scaled by a speed factor (by default the TFLOPS ratio).  That is
**our own assumption**, not from the paper or the code, and is flagged as such in ``docs/jabas.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

__all__ = [
    "CompProfile",
    "ModelProfile",
    "ServerSpec",
    "bundled_jabas_dir",
    "derive_cluster_types",
    "derive_gpu_type",
    "load_cluster_info",
    "load_jabas_profile",
    "load_jabas_resnet50",
]

_COMP_RE = re.compile(r"_(\d+)_(\d+)_comp_profile\.json$")


@dataclass(frozen=True, slots=True)
class CompProfile:
    """One computation profile: averaged times of one iteration in **ms** (IIDP computation profiler).

    ``copy_time`` is the parameter copy from VSW-0 to the other ``num_models - 1`` VSWs; ``bn_sync_time``
    is a per-model constant (6.29 ms in every released profile).
    """

    gpu_type: str
    lbs: int
    num_models: int
    total_time: float
    data_time: float
    fwd_time: float
    bwd_time: float
    update_time: float
    copy_time: float
    bn_sync_time: float = 0.0


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A server of the cluster description (``cluster_info.json``): bandwidths in bytes/s."""

    name: str
    gpu_type: str
    tflops: float
    num_gpus: int
    intra_bandwidth: float
    inter_bandwidth: float

    def with_gpus(self, num_gpus: int) -> ServerSpec:
        """The same server restricted to ``num_gpus`` GPUs (a candidate allocation may use part of it)."""
        if not 0 < num_gpus <= self.num_gpus:
            raise ValueError(f"num_gpus={num_gpus} outside 1..{self.num_gpus} for server {self.name!r}")
        return replace(self, num_gpus=num_gpus)


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """Everything the IIDP performance model needs for one DNN model.

    ``comp[(gpu_type, lbs)]`` holds the profiles sorted by VSW count; ``max_vsw[(gpu_type, lbs)]`` is the
    memory limit (max VSWs per GPU); comm pairs are (theoretical ms, measured ms).
    """

    model: str
    comp: Mapping[tuple[str, int], tuple[CompProfile, ...]]
    max_vsw: Mapping[tuple[str, int], int]
    bucket_sizes_mb: tuple[float, ...]
    intra_comm: tuple[tuple[float, float], ...]
    inter_comm: tuple[tuple[float, float], ...]
    derived_types: frozenset[str] = field(default_factory=frozenset)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({t for t, _ in self.comp}))

    def lbs_grid(self, gpu_type: str | None = None) -> tuple[int, ...]:
        """Profiled local batch sizes (of one GPU type, or of any type)."""
        return tuple(sorted({b for t, b in self.comp if gpu_type is None or t == gpu_type}))

    def supports(self, gpu_type: str, lbs: int) -> bool:
        return (gpu_type, lbs) in self.comp and self.max_vsw.get((gpu_type, lbs), 0) >= 1


# --------------------------------------------------------------------------------------------- loading
def bundled_jabas_dir() -> Traversable:
    """Root of the bundled JABAS data (``models/profiles/jabas``)."""
    return resources.files("elastisched.models").joinpath("profiles", "jabas")


def _as_trav(path: str | Path | Traversable) -> Traversable:
    return Path(path) if isinstance(path, str | Path) else path


def _read_json(p: Traversable) -> dict:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:  # pragma: no cover - message path
        raise ValueError(f"cannot read profile file {p}: {exc}") from exc


def _dirs(p: Traversable) -> list[Traversable]:
    return sorted((c for c in p.iterdir() if c.is_dir()), key=lambda c: c.name)


def _read_comm(p: Traversable) -> tuple[tuple[float, float], ...]:
    rows: list[tuple[float, float]] = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(",")
        if len(parts) != 2:
            raise ValueError(f"{p}:{i}: expected 'theoretical_ms,measured_ms', got {line!r}")
        rows.append((float(parts[0]), float(parts[1])))
    if len(rows) < 2:
        raise ValueError(f"{p}: need at least 2 all-reduce measurements for a linear fit, got {len(rows)}")
    return tuple(rows)


def load_jabas_profile(root: str | Path | Traversable) -> ModelProfile:
    """Read a released profile tree (the directory that holds ``cluster_comp_profile_data`` etc.)."""
    root = _as_trav(root)
    comp: dict[tuple[str, int], list[CompProfile]] = {}
    model = ""
    for lbs_dir in _dirs(root.joinpath("cluster_comp_profile_data")):
        for node_dir in _dirs(lbs_dir):
            for f in sorted(node_dir.iterdir(), key=lambda c: c.name):
                if not _COMP_RE.search(f.name):
                    continue
                d = _read_json(f)
                try:
                    cp = CompProfile(
                        gpu_type=str(d["gpu_type"]),
                        lbs=int(d["lbs"]),
                        num_models=int(d["num_models"]),
                        total_time=float(d["total_time"]),
                        data_time=float(d["data_time"]),
                        fwd_time=float(d["fwd_time"]),
                        bwd_time=float(d["bwd_time"]),
                        update_time=float(d["update_time"]),
                        copy_time=float(d["copy_time"]),
                        bn_sync_time=float(d.get("bn_sync_time", 0.0)),
                    )
                except (KeyError, TypeError, ValueError) as exc:
                    raise ValueError(f"{f}: bad computation profile field: {exc}") from exc
                if cp.lbs != int(lbs_dir.name):
                    raise ValueError(f"{f}: lbs={cp.lbs} does not match its directory {lbs_dir.name}")
                model = model or str(d.get("model", ""))
                comp.setdefault((cp.gpu_type, cp.lbs), []).append(cp)
    if not comp:
        raise ValueError(f"{root}: no computation profiles found under cluster_comp_profile_data/")
    comp_sorted: dict[tuple[str, int], tuple[CompProfile, ...]] = {}
    for key, rows in comp.items():
        rows.sort(key=lambda c: c.num_models)
        if rows[0].num_models != 1:
            raise ValueError(f"profile {key}: the 1-VSW profile (num_models=1) is required")
        comp_sorted[key] = tuple(rows)

    max_vsw: dict[tuple[str, int], int] = {}
    for lbs_dir in _dirs(root.joinpath("cluster_mem_profile_data")):
        for node_dir in _dirs(lbs_dir):
            d = _read_json(node_dir.joinpath("max_memory_profile_info.json"))
            max_vsw[(str(d["gpu_type"]), int(d["lbs"]))] = int(d["max_num_models"])
    missing = sorted(set(comp_sorted) - set(max_vsw))
    if missing:
        raise ValueError(f"{root}: computation profiles without a memory profile: {missing}")

    bucket_files = sorted(root.joinpath("bucket_profile_data").iterdir(), key=lambda c: c.name)
    bucket_files = [f for f in bucket_files if f.name.endswith(".json")]
    if not bucket_files:
        raise ValueError(f"{root}: no bucket profile in bucket_profile_data/")
    # The release takes the last file in sorted order (ThroughputModel.get_constant); so do we.
    buckets = tuple(float(x) for x in _read_json(bucket_files[-1])["bucket_size_distribution"])
    if not buckets or min(buckets) <= 0:
        raise ValueError(f"{bucket_files[-1]}: bucket sizes must be positive, got {buckets}")
    comm = root.joinpath("comm_profile_data")
    return ModelProfile(
        model=model,
        comp=comp_sorted,
        max_vsw={k: v for k, v in max_vsw.items() if k in comp_sorted},
        bucket_sizes_mb=buckets,
        intra_comm=_read_comm(comm.joinpath("intra_comm_profile_data.txt")),
        inter_comm=_read_comm(comm.joinpath("inter_comm_profile_data.txt")),
    )


def load_jabas_resnet50() -> ModelProfile:
    """The bundled ResNet-50 quickstart profiles (V100 + P100, LBS 32..160)."""
    return load_jabas_profile(bundled_jabas_dir().joinpath("resnet50", "quickstart"))


def load_cluster_info(path: str | Path | Traversable | None = None) -> tuple[ServerSpec, ...]:
    """Read a ``cluster_info.json`` (default: the bundled 9-node, 8-type example cluster).

    The release spells TFLOPS as ``tfplos``; both spellings are accepted.
    """
    p = (
        bundled_jabas_dir().joinpath("common", "cluster_config", "example_cluster_info.json")
        if path is None
        else _as_trav(path)
    )
    data = _read_json(p)
    out: list[ServerSpec] = []
    for name, d in data.items():
        try:
            tflops = d["tfplos"] if "tfplos" in d else d["tflops"]
            out.append(
                ServerSpec(
                    name=str(name),
                    gpu_type=str(d["type"]),
                    tflops=float(tflops),
                    num_gpus=int(d["number"]),
                    intra_bandwidth=float(d["intra_network_bandwidth"]),
                    inter_bandwidth=float(d["inter_network_bandwidth"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{p}: server {name!r}: bad or missing field {exc}") from exc
        if out[-1].num_gpus <= 0 or out[-1].tflops <= 0:
            raise ValueError(f"{p}: server {name!r}: number and tfplos must be positive")
    return tuple(out)


# --------------------------------------------------------------------------------------------- derived
def derive_gpu_type(
    profile: ModelProfile,
    base_type: str,
    new_type: str,
    speed_factor: float,
    *,
    max_vsw_scale: float = 1.0,
) -> ModelProfile:
    """Add an unprofiled GPU type by scaling a profiled one (**our assumption**, not from JABAS).

    Forward, backward, update and copy times are divided by ``speed_factor`` (e.g. the TFLOPS ratio
    new/base); data (host-to-device) and BN-sync times are kept.  Max VSWs are scaled by
    ``max_vsw_scale`` (e.g. a memory ratio), floored, never below 1 where the base fits one VSW.
    """
    if speed_factor <= 0:
        raise ValueError(f"speed_factor must be positive, got {speed_factor}")
    if new_type in profile.gpu_types:
        return profile
    comp = dict(profile.comp)
    max_vsw = dict(profile.max_vsw)
    found = False
    for (t, b), rows in profile.comp.items():
        if t != base_type:
            continue
        found = True
        comp[(new_type, b)] = tuple(
            replace(
                c,
                gpu_type=new_type,
                fwd_time=c.fwd_time / speed_factor,
                bwd_time=c.bwd_time / speed_factor,
                update_time=c.update_time / speed_factor,
                copy_time=c.copy_time / speed_factor,
                total_time=c.data_time + (c.fwd_time + c.bwd_time + c.update_time) / speed_factor,
            )
            for c in rows
        )
        base_m = profile.max_vsw[(t, b)]
        max_vsw[(new_type, b)] = max(int(base_m * max_vsw_scale), 1 if base_m >= 1 else 0)
    if not found:
        raise ValueError(f"base GPU type {base_type!r} not in profile (have {profile.gpu_types})")
    return replace(profile, comp=comp, max_vsw=max_vsw, derived_types=profile.derived_types | {new_type})


def derive_cluster_types(
    profile: ModelProfile, servers: Iterable[ServerSpec], base_type: str, base_tflops: float
) -> ModelProfile:
    """Derive every unprofiled GPU type of ``servers`` from ``base_type`` by the TFLOPS ratio."""
    out = profile
    for s in servers:
        if s.gpu_type not in out.gpu_types:
            out = derive_gpu_type(out, base_type, s.gpu_type, s.tflops / base_tflops)
    return out
