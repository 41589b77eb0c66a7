"""`python -m elastisched.service`: the server without the CLI's imports (used by tests and benchmarks)."""

from __future__ import annotations

import argparse
import sys

from elastisched.core.errors import ElastischedError
from elastisched.service.server import serve


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m elastisched.service")
    ap.add_argument("--db", default=None, help="SQLAlchemy URL; default sqlite:///<workdir>/elastisched.db")
    ap.add_argument("--cluster", default="2x4:cpu")
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8470)
    ap.add_argument("--workdir", default=".elastisched")
    ap.add_argument("--scripts-dir", default=None, help="job scripts must live under it (default: an empty "
                    "<workdir>/scripts)")
    ap.add_argument("--tick", type=float, default=0.5)
    ap.add_argument("--policy-interval", type=float, default=None, help="period of a periodic policy's rounds (s)")
    ap.add_argument("--grace", type=float, default=15.0)
    ap.add_argument("--max-retries", type=int, default=2)
    ap.add_argument("--max-follows", type=int, default=32, help="concurrent `logs --follow` streams")
    ap.add_argument("--follow-idle", type=float, default=300.0, help="end a log follow after this long (s) "
                    "without new output")
    ap.add_argument("--profiles", default=None, help="measured application profiles (Pollux format), one dir each")
    ap.add_argument("--backend", default="local", choices=["local", "ray", "fake"],
                    help="local processes, a Ray cluster, or fake nodes that exist only in the service (scale tests)")
    ap.add_argument("--fake-mtbf", type=float, default=None, help="--backend fake: mean seconds until a running "
                    "generation fails (default: never)")
    ap.add_argument("--ray-address", default=None, help="Ray cluster (auto or HOST:PORT) for --backend ray")
    a = ap.parse_args()
    try:
        serve(host=a.host, port=a.port, db=a.db, cluster=a.cluster, policy=a.policy, workdir=a.workdir,
              scripts_dir=a.scripts_dir, tick_s=a.tick, grace_s=a.grace, max_retries=a.max_retries,
              profiles=a.profiles, max_follows=a.max_follows, follow_idle_s=a.follow_idle,
              backend=a.backend, ray_address=a.ray_address, policy_interval=a.policy_interval,
              fake_mtbf_s=a.fake_mtbf)
    except ElastischedError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
