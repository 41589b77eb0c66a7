"""A GPU user's path on a CPU machine: backend choice per worker, and the model moved to `ctx.device`."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from elastisched.train import runtime
from elastisched.train.contract import LaunchEnv
from elastisched.train.parallel import ElasticDataParallel


def _env(local_rank: int | None) -> LaunchEnv:
    return LaunchEnv(job_id="j", generation=0, rank=local_rank or 0, world_size=4, local_rank=local_rank,
                     master_addr="127.0.0.1", master_port=1)


@pytest.mark.parametrize(("cuda", "devices", "local_rank", "want"), [
    (False, 0, 0, "gloo"),  # CPU machine
    (True, 2, 1, "nccl"),  # a GPU of its own
    (True, 2, 3, "gloo"),  # more local workers than GPUs: nccl would fail in set_device
    (True, 1, None, "nccl"),  # no local rank given: device 0
])
def test_default_backend_needs_a_gpu_per_worker(monkeypatch: pytest.MonkeyPatch, cuda: bool, devices: int,
                                                local_rank: int | None, want: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
    assert runtime.default_backend(_env(local_rank)) == want


class _Ctx:
    """The parts of ElasticContext the wrapper reads, on a device other than the CPU."""

    device = torch.device("meta")
    rank, world_size, accum, model, distributed = 0, 1, [1], None, False

    def checkpoint(self) -> None:
        return None


def test_wrapper_moves_the_module_to_the_context_device() -> None:
    net = nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    model = ElasticDataParallel(net, opt, ctx=_Ctx())  # type: ignore[arg-type]
    assert {p.device.type for p in model.module.parameters()} == {"meta"}
    # the optimizer steps the module's parameters, even where the move made new Parameter objects
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in net.parameters()]
