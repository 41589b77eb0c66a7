"""Cluster specifications: strings, files, and errors that name the bad part."""

from __future__ import annotations

from pathlib import Path

import pytest

import peer_data
from elastisched.core.cluster import parse_cluster
from elastisched.core.errors import ConfigError
from elastisched.core.types import Pool
from elastisched.sim.runner import load_cluster


def test_string_specs() -> None:
    nodes = parse_cluster("6x4:t4,2x8:a100,3x8:rtx")
    assert len(nodes) == 11 and sum(n.num_gpus for n in nodes) == 24 + 16 + 24
    assert [n.index for n in nodes] == list(range(11))
    assert nodes[6].node_id == "a100-0" and nodes[6].gpu_type == "a100"
    loan = parse_cluster("2x4:t4,3x4:t4@loanable")
    assert [n.pool for n in loan].count(Pool.LOANABLE) == 3
    assert len({n.node_id for n in loan}) == 5


@pytest.mark.parametrize("bad", ["", "16*4", "0x4:t4", "4x0", "4x4:t4@nowhere"])
def test_bad_specs_name_the_part(bad: str) -> None:
    with pytest.raises(ConfigError, match="--cluster"):
        parse_cluster(bad)


def test_yaml_and_json_files(tmp_path: Path) -> None:
    y = tmp_path / "c.yaml"
    y.write_text("- {nodes: 2, gpus_per_node: 8, gpu_type: a100}\n- {nodes: 1, gpus_per_node: 4}\n")
    nodes = load_cluster(str(y))
    assert [n.gpu_type for n in nodes] == ["a100", "a100", "t4"]
    j = tmp_path / "c.json"
    j.write_text('{"nodes": [{"nodes": 1, "gpus_per_node": 2, "gpu_type": "v100"}]}')
    assert load_cluster(str(j))[0].num_gpus == 2
    j.write_text('[{"gpus_per_node": 2}]')
    with pytest.raises(ConfigError, match=r"cluster\[0\]"):
        load_cluster(str(j))


def test_pai_is_the_alibaba_composition() -> None:
    """`pai`: 1,814 GPU machines (2-GPU T4 and P100, 8-GPU V100, V100M32 and MISC), 6,742 GPUs; with the
    bundled profiles (T4 only) every GPU is priced as a T4, the machines' sizes and names kept."""
    from collections import Counter

    from elastisched.core.cluster import PAI_GPUS

    nodes = load_cluster("pai")
    assert len(nodes) == 1814 and sum(n.num_gpus for n in nodes) == PAI_GPUS == 6742
    assert {n.gpu_type for n in nodes} == {"t4"}
    by_kind = Counter((n.node_id.rsplit("-", 1)[0], n.num_gpus) for n in nodes)
    assert by_kind == {("t4", 2): 497, ("p100", 2): 798, ("v100", 8): 104, ("v100m32", 8): 135, ("misc", 8): 280}
    assert [n.index for n in nodes] == list(range(1814)) and len({n.node_id for n in nodes}) == 1814


def test_pai_prices_each_type_as_the_first_profiled_choice() -> None:
    from elastisched.core.cluster import pai_type_map

    sia = {"t4", "v100", "a100", "rtx", "rtx6000"}
    assert pai_type_map(sia) == {"T4": "t4", "P100": "rtx", "V100": "v100", "V100M32": "v100", "MISC": "t4"}
    assert pai_type_map({"t4", "v100"})["P100"] == "t4"  # no RTX profile: the next choice
    nodes = load_cluster("pai", sia)
    gpus = {t: sum(n.num_gpus for n in nodes if n.gpu_type == t) for t in ("t4", "rtx", "v100")}
    assert gpus == {"t4": 994 + 2240, "rtx": 1596, "v100": 832 + 1080}
    with pytest.raises(ConfigError, match="pai"):
        load_cluster("pai", {"a100"})


def test_pai_through_setup_uses_the_profiles_of_the_workload(tmp_path: Path) -> None:
    """`sim run --cluster pai`: priced with the types every application of the workload is profiled for."""
    from elastisched.sim.runner import setup

    assert {n.gpu_type for n in setup("philly:jobs=50,seed=1", "pai").nodes} == {"t4"}


@peer_data.needs("alibaba-pai-v2020", "pai_machine_spec.csv")
def test_pai_table_is_counted_from_the_machine_spec() -> None:
    """The bundled table is the peer data's machine spec counted by (gpu_type, cap_gpu), GPU machines only."""
    import csv
    from collections import Counter

    from elastisched.core.cluster import PAI_MACHINES

    path = peer_data.path("alibaba-pai-v2020", "pai_machine_spec.csv")
    assert path is not None
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1897
    counted = Counter((r["gpu_type"], int(r["cap_gpu"])) for r in rows if int(r["cap_gpu"]) > 0)
    assert counted == {(t, g): n for t, g, n in PAI_MACHINES}


@peer_data.needs("gavel", "simulation_throughputs.json")
@peer_data.needs("sia", "traces")
def test_p100_is_nearest_the_rtx_profile() -> None:
    """Why P100 -> rtx: Gavel's measured P100/V100 throughput (geometric mean over its single-GPU models but the
    embedding-bound Recommendation) is nearer Sia's RTX 2080 Ti/V100 than its T4/V100 on the compute-bound
    applications (imagenet, bert, deepspeech2)."""
    import json
    import math

    from elastisched.models import PerfModels

    gavel = json.loads(peer_data.path("gavel", "simulation_throughputs.json").read_text())  # type: ignore[union-attr]
    ratios = [gavel["p100"][k]["null"] / v["null"] for k, v in gavel["v100"].items()
              if k.endswith(", 1)") and "Recommendation" not in k]
    p100 = math.exp(sum(map(math.log, ratios)) / len(ratios))
    models = PerfModels.load(peer_data.path("sia", "traces"))
    for name in ("imagenet", "bert", "deepspeech2"):
        app = models.app(name)
        cfg = app.batch_config(1, app.init_batch_size)
        rate = {t: app.throughput(t, (1,), cfg) for t in ("t4", "v100", "rtx")}
        assert abs(rate["rtx"] / rate["v100"] - p100) < abs(rate["t4"] / rate["v100"] - p100), name
