"""IIDP performance model: iteration time of a server's GPUs for (GPU type, LBS b, VSWs m, GA steps a).

IIDP (the substrate of JABAS) gives every worker the same local batch ``b``; a GPU runs ``m`` virtual
stream workers (VSWs) that each accumulate ``a`` extra micro-batches, i.e. ``m(a+1)`` decoupled workers.
The model follows the released code [code: IIDP ``iidp/config/model/throughput/throughput_model.py``,
``comp/comp_model.py``, ``comm/allreduce_model.py``; digest ``papers/jabas.md`` §2(d)]; times in seconds:

* compute: ``thp1 = b / (fwd+bwd)|_{m=1}``, ``ρ(m) = thp(m)/thp1``; fit ``ρ(m) = α ln m + β`` (least squares
  on ln m) when the largest profiled count ``M ≥ 3``, else the profiled table; ``T_fb(m) = b·m/(ρ(m)·thp1)``
  split by ``r_f = fwd/(fwd+bwd)`` of the profile at ``M``;
* data: profiled ``data_time[m]``, else ``data_time[1]·m``;
* all-reduce of DDP bucket k: ``ideal_k = (S_k·2^20/N)·4(N−1)/BW`` ms with N = GPUs of the cluster and BW
  the server's inter-node bandwidth if the cluster has > 1 server, else intra-node; ``AR_k = a_c·ideal_k +
  b_c`` with ``(a_c, b_c)`` the least-squares line through the (theoretical, measured) profile pairs;
* ``T = data + bn·m + (data+fwd+bwd)·a + fwd + max(bwd, Σ_{k<K} AR_k) + AR_K + X`` with
  ``X_seq = update + copy1·(m−1)`` and ``X_overlap = X_seq·S_K/ΣS``;
* cluster iteration time = slowest server (unit); throughput = ``b·W / T_cluster``.

``T`` is affine in ``a``: ``T(m, a) = base(m) + a·step(m)``; :meth:`IIDPModel.unit_coeffs` returns the two
vectors so the solver can evaluate every (m, a) at once.

Readings (see ``docs/jabas.md``): the release rounds ``thp1`` to 0.01, ``ρ`` samples to 0.001 and ``T_fb``
to 0.1 ms; we keep full precision (differences < 0.1 %).  Beyond the profiled table (``M < 3``) we hold ρ
flat at ``ρ(M)`` where the release would raise.  Max VSWs = min(memory profile, 10) (the patched
autograd engine pool has 10 engines, digest §1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from elastisched.models.iidp.profiles import CompProfile, ModelProfile, ServerSpec

__all__ = [
    "BUCKET_CAP_MB",
    "MAX_VSW_ENGINES",
    "WEIGHT_SYNC_THRESHOLD",
    "CompModel",
    "IIDPModel",
    "LinearFit",
    "VswScaling",
    "WeightSync",
    "recommend_weight_sync",
]

WeightSync = Literal["overlap", "sequential"]

#: DDP default bucket capacity (MB) and the release's "recommend" threshold [code: IIDP
#: ``iidp/train/train_helper.py`` ``select_weight_sync_method``, ``WEIGHT_SYNC_METHOD_SELECTION_THRESHOLD``].
BUCKET_CAP_MB = 25.0
WEIGHT_SYNC_THRESHOLD = 1.5
#: Size of the patched autograd engine pool: no more VSWs per GPU than this (digest §1).
MAX_VSW_ENGINES = 10


def recommend_weight_sync(bucket_sizes_mb: Sequence[float]) -> WeightSync:
    """``sequential`` if the mean bucket (all but the last) exceeds 1.5 × 25 MB, else ``overlap``."""
    head = list(bucket_sizes_mb[:-1]) or list(bucket_sizes_mb)
    return "sequential" if float(np.mean(head)) / BUCKET_CAP_MB > WEIGHT_SYNC_THRESHOLD else "overlap"


@dataclass(frozen=True, slots=True)
class LinearFit:
    """``y = slope·x + intercept`` (OLS, as sklearn ``LinearRegression`` in the release)."""

    slope: float
    intercept: float

    @classmethod
    def fit(cls, pairs: Sequence[tuple[float, float]]) -> LinearFit:
        x = np.array([p[0] for p in pairs], dtype=float)
        y = np.array([p[1] for p in pairs], dtype=float)
        slope, intercept = np.polyfit(x, y, 1)
        return cls(float(slope), float(intercept))

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        return self.slope * x + self.intercept


@dataclass(frozen=True, slots=True)
class VswScaling:
    """Normalised multi-stream throughput ρ(m) = thp(m)/thp(1) (``VSWThroughputModel`` in the release)."""

    alpha: float
    beta: float
    table: tuple[float, ...] = ()  # ρ(1..M) when fewer than 3 VSW counts were profiled

    @property
    def is_log_fit(self) -> bool:
        return not self.table

    def rho(self, m: np.ndarray) -> np.ndarray:
        m = np.asarray(m, dtype=float)
        if self.is_log_fit:
            return self.alpha * np.log(m) + self.beta
        tab = np.asarray(self.table)
        idx = np.clip(m.astype(int) - 1, 0, len(tab) - 1)
        return tab[idx]


@dataclass(frozen=True, slots=True)
class CompModel:
    """Fitted computation model of one (GPU type, LBS)."""

    gpu_type: str
    lbs: int
    max_vsw: int
    thp1: float  # samples/s of one VSW (fwd+bwd only)
    scaling: VswScaling
    fwd_ratio: float
    update_s: float
    copy_per_model_s: float
    bn_sync_s: float
    data_times: Mapping[int, float]

    @classmethod
    def fit(cls, rows: Sequence[CompProfile], max_vsw: int) -> CompModel:
        """Fit from the profiles of one (type, LBS), sorted by VSW count; constants come from the largest."""
        rows = sorted(rows, key=lambda c: c.num_models)
        top = rows[-1]
        big_m = top.num_models
        lbs = top.lbs
        thp1 = lbs / ((rows[0].fwd_time + rows[0].bwd_time) / 1000.0)
        ms = np.array([r.num_models for r in rows], dtype=float)
        rho = np.array([(lbs * r.num_models / ((r.fwd_time + r.bwd_time) / 1000.0)) / thp1 for r in rows])
        if big_m >= 3:
            alpha, beta = np.polyfit(np.log(ms), rho, 1)
            scaling = VswScaling(float(alpha), float(beta))
        else:
            scaling = VswScaling(0.0, 0.0, tuple(float(x) for x in rho))
        return cls(
            gpu_type=top.gpu_type,
            lbs=lbs,
            max_vsw=min(max_vsw, MAX_VSW_ENGINES),
            thp1=thp1,
            scaling=scaling,
            fwd_ratio=top.fwd_time / (top.fwd_time + top.bwd_time),
            update_s=top.update_time / 1000.0,
            copy_per_model_s=(top.copy_time / (big_m - 1) / 1000.0) if big_m > 1 else 0.0,
            bn_sync_s=top.bn_sync_time / 1000.0,
            data_times={r.num_models: r.data_time / 1000.0 for r in rows},
        )

    def fwd_bwd_time(self, m: np.ndarray | int) -> np.ndarray:
        """Forward+backward time of ``m`` concurrent VSWs (s)."""
        m = np.asarray(m, dtype=float)
        return self.lbs * m / (self.scaling.rho(m) * self.thp1)

    def data_time(self, m: np.ndarray | int) -> np.ndarray:
        m = np.asarray(m, dtype=int)
        one = self.data_times[1]
        return np.array([self.data_times.get(int(k), one * int(k)) for k in m.ravel()]).reshape(m.shape)


@dataclass(frozen=True, slots=True)
class IIDPModel:
    """Profile-driven iteration-time model of one DNN model on any profiled GPU type."""

    model: str
    comp: Mapping[tuple[str, int], CompModel]
    bucket_sizes_mb: tuple[float, ...]
    intra_fit: LinearFit
    inter_fit: LinearFit
    weight_sync: WeightSync

    @classmethod
    def from_profile(
        cls, profile: ModelProfile, weight_sync: WeightSync | Literal["auto"] = "auto"
    ) -> IIDPModel:
        ws: WeightSync = (
            recommend_weight_sync(profile.bucket_sizes_mb) if weight_sync == "auto" else weight_sync
        )
        if ws not in ("overlap", "sequential"):
            raise ValueError(f"weight_sync must be 'overlap', 'sequential' or 'auto', got {weight_sync!r}")
        comp = {
            k: CompModel.fit(rows, profile.max_vsw[k])
            for k, rows in profile.comp.items()
            if profile.max_vsw.get(k, 0) >= 1
        }
        return cls(
            profile.model,
            comp,
            tuple(profile.bucket_sizes_mb),
            LinearFit.fit(profile.intra_comm),
            LinearFit.fit(profile.inter_comm),
            ws,
        )

    # ------------------------------------------------------------------ queries
    def lbs_grid(self, gpu_type: str | None = None) -> tuple[int, ...]:
        return tuple(sorted({b for t, b in self.comp if gpu_type is None or t == gpu_type}))

    def supports(self, gpu_type: str, lbs: int) -> bool:
        return (gpu_type, lbs) in self.comp

    def max_vsw(self, gpu_type: str, lbs: int) -> int:
        """Memory limit: max VSWs per GPU for (type, LBS); 0 if not profiled (does not fit)."""
        c = self.comp.get((gpu_type, lbs))
        return 0 if c is None else c.max_vsw

    def _cm(self, gpu_type: str, lbs: int) -> CompModel:
        try:
            return self.comp[(gpu_type, lbs)]
        except KeyError:
            raise KeyError(
                f"no profile for GPU type {gpu_type!r} at LBS {lbs} (profiled: {sorted(self.comp)})"
            ) from None

    def allreduce_times(self, bandwidth: float, total_gpus: int, multi_server: bool) -> np.ndarray:
        """Predicted all-reduce time of each DDP bucket (s), in reduction order."""
        if total_gpus <= 1:
            return np.zeros(len(self.bucket_sizes_mb))
        size = np.asarray(self.bucket_sizes_mb) * 1024.0 * 1024.0
        ideal_ms = size / total_gpus * 4.0 * (total_gpus - 1) / bandwidth * 1000.0
        fit = self.inter_fit if multi_server else self.intra_fit
        return np.asarray(fit(ideal_ms)) / 1000.0

    def unit_coeffs(
        self, gpu_type: str, lbs: int, *, bandwidth: float, total_gpus: int, multi_server: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(base, step)`` over m = 1..max_vsw (index m−1): ``T(m, a) = base[m−1] + a·step[m−1]``."""
        cm = self._cm(gpu_type, lbs)
        m = np.arange(1, cm.max_vsw + 1)
        fb = cm.fwd_bwd_time(m)
        fwd, bwd = fb * cm.fwd_ratio, fb * (1.0 - cm.fwd_ratio)
        data = cm.data_time(m)
        ar = self.allreduce_times(bandwidth, total_gpus, multi_server)
        x = cm.update_s + cm.copy_per_model_s * (m - 1)
        if self.weight_sync == "overlap":
            x = x * (self.bucket_sizes_mb[-1] / sum(self.bucket_sizes_mb))
        base = data + cm.bn_sync_s * m + fwd + np.maximum(bwd, ar[:-1].sum()) + ar[-1] + x
        step = data + fwd + bwd
        return base, step

    def iteration_time(
        self,
        gpu_type: str,
        lbs: int,
        m: int,
        a: int,
        *,
        bandwidth: float,
        total_gpus: int,
        multi_server: bool,
    ) -> float:
        """Server-level iteration time (s) of GPUs running ``m`` VSWs with ``a`` GA steps each."""
        cm = self._cm(gpu_type, lbs)
        if not 1 <= m <= cm.max_vsw:
            raise ValueError(f"m={m} outside 1..{cm.max_vsw} (memory limit of {gpu_type} at LBS {lbs})")
        if a < 0:
            raise ValueError(f"accumulation steps must be >= 0, got {a}")
        base, step = self.unit_coeffs(
            gpu_type, lbs, bandwidth=bandwidth, total_gpus=total_gpus, multi_server=multi_server
        )
        return float(base[m - 1] + a * step[m - 1])

    def server_time(
        self, server: ServerSpec, cluster: Sequence[ServerSpec], lbs: int, m: int, a: int
    ) -> float:
        """Iteration time of ``server``'s GPUs inside ``cluster`` (which fixes N and intra vs inter)."""
        multi = len({s.name for s in cluster}) > 1
        return self.iteration_time(
            server.gpu_type,
            lbs,
            m,
            a,
            total_gpus=sum(s.num_gpus for s in cluster),
            multi_server=multi,
            bandwidth=server.inter_bandwidth if multi else server.intra_bandwidth,
        )

    def cluster_iteration_time(
        self, cluster: Sequence[ServerSpec], lbs: int, configs: Sequence[tuple[int, int]]
    ) -> float:
        """Slowest server: ``configs[i] = (m, a)`` of ``cluster[i]`` (identical on all its GPUs)."""
        if len(configs) != len(cluster):
            raise ValueError(f"need one (m, a) per server: {len(configs)} configs for {len(cluster)} servers")
        return max(
            self.server_time(s, cluster, lbs, m, a) for s, (m, a) in zip(cluster, configs, strict=True)
        )

    def cluster_throughput(
        self, cluster: Sequence[ServerSpec], lbs: int, configs: Sequence[tuple[int, int]]
    ) -> float:
        """Samples/s = b·W / T_cluster with W = Σ_servers GPUs·m(a+1)."""
        w = sum(s.num_gpus * m * (a + 1) for s, (m, a) in zip(cluster, configs, strict=True))
        return lbs * w / self.cluster_iteration_time(cluster, lbs, configs)
