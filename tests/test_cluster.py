"""Cluster specifications: strings, files, and errors that name the bad part."""

from __future__ import annotations

from pathlib import Path

import pytest

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
