"""A pre-imported worker interpreter for `launcher.WarmPool`.

Importing torch (and torch._dynamo, pulled in by the first optimizer) is most of a worker's cold
start (4–5 s of CPU here), and all of it is resize downtime. A
standby process does those imports ahead of time, then blocks on stdin for one assignment
({"env", "script", "args"} as a JSON line), applies it and runs the script as __main__. Variables read
only at import time (e.g. OMP_NUM_THREADS) come from the pool's environment, not the assignment.
"""

from __future__ import annotations

import json
import os
import sys

from elastisched.train._entry import run_script


def main() -> None:
    import numpy  # noqa: F401  - the expensive imports are the point of this process
    import torch
    import torch.distributed

    import elastisched.train.data
    import elastisched.train.parallel  # noqa: F401

    # First optimizer construction lazily imports torch._dynamo (~2 s in torch 2.13); pay it now, along
    # with autograd's first backward.
    w = torch.zeros(2, requires_grad=True)
    torch.optim.SGD([w], lr=0.1).step()
    (w * 2).sum().backward()
    if len(sys.argv) > 1:  # tell the pool this member is warm
        with open(os.path.join(sys.argv[1], str(os.getpid())), "w"):
            pass

    line = sys.stdin.readline()
    if not line.strip():
        return  # the pool was closed
    job = json.loads(line)
    os.environ.update(job["env"])
    run_script(job["script"], job["args"])


if __name__ == "__main__":
    main()
