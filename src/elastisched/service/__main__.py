"""`python -m elastisched.service`: the server without the CLI's imports (used by tests and benchmarks)."""

from __future__ import annotations

import argparse
import sys

from elastisched.core.errors import ElastischedError
from elastisched.service.secret_inputs import reexec_without_secrets


def main() -> None:
    reexec_without_secrets()  # secrets from the environment go to a fresh image through a pipe (returns if none)
    from elastisched.service.isolation import DEFAULT_MAX_QUEUED, JobsConfig
    from elastisched.service.routes.context import API_THREADS
    from elastisched.service.server import serve

    ap = argparse.ArgumentParser(prog="python -m elastisched.service")
    ap.add_argument("--db", default=None, help="SQLAlchemy URL without a password; default "
                    "sqlite:///<workdir>/elastisched.db (a URL with a password: $ELASTISCHED_DB or --db-file)")
    ap.add_argument("--db-file", default=None, help="file holding the database URL")
    ap.add_argument("--token-file", default=None, help="file holding the admin token (else $ELASTISCHED_TOKEN, "
                    "else <workdir>/token)")
    ap.add_argument("--cluster", default="2x4:cpu")
    ap.add_argument("--policy", default="elastisched")
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
    ap.add_argument("--backend", default="local", choices=["local", "ray", "slurm", "fake"],
                    help="local processes, a Ray cluster, Slurm, or fake nodes that exist only in the service")
    ap.add_argument("--fake-mtbf", type=float, default=None, help="--backend fake: mean seconds until a running "
                    "generation fails (default: never)")
    ap.add_argument("--ray-address", default=None, help="Ray cluster (auto or HOST:PORT) for --backend ray")
    ap.add_argument("--isolation", default="auto", choices=["auto", "users", "none"], help="users: jobs run as "
                    "each user's Unix account (needs root); none: as the service; auto: users when root")
    ap.add_argument("--user-map", default=None, help="file of `USER ACCOUNT` lines: the account a user's jobs "
                    "run as")
    ap.add_argument("--create-job-users", action="store_true", help="create an unprivileged account es-<user> "
                    "for each user at its first launch (root)")
    ap.add_argument("--job-env", action="append", default=[], help="NAME (or NAME*) to pass to jobs from this "
                    "environment, or NAME=VALUE to set (repeatable)")
    ap.add_argument("--job-python", default=None, help="interpreter jobs run under (default: this one)")
    ap.add_argument("--max-queued-per-user", type=int, default=DEFAULT_MAX_QUEUED,
                    help="queued jobs a user who is not an admin may have (429 beyond)")
    ap.add_argument("--api-threads", type=int, default=API_THREADS,
                    help="worker threads of the API's polled reads, and as many of submissions (docs/service.md)")
    ap.add_argument("--slurm", action="append", default=[], help="--backend slurm, KEY=VALUE (repeatable): "
                    "partition=, loan-partition=, account=, shared=DIR, arg=SBATCH_OPTION")
    a = ap.parse_args()
    jobs = JobsConfig(isolation=a.isolation, user_map=a.user_map, create_users=a.create_job_users,
                      job_env=tuple(a.job_env), python=a.job_python, max_queued=a.max_queued_per_user)
    try:
        serve(host=a.host, port=a.port, db=a.db, cluster=a.cluster, policy=a.policy, workdir=a.workdir,
              scripts_dir=a.scripts_dir, tick_s=a.tick, grace_s=a.grace, max_retries=a.max_retries,
              profiles=a.profiles, max_follows=a.max_follows, follow_idle_s=a.follow_idle,
              backend=a.backend, ray_address=a.ray_address, policy_interval=a.policy_interval, jobs=jobs,
              db_file=a.db_file, token_file=a.token_file, fake_mtbf_s=a.fake_mtbf, slurm=tuple(a.slurm),
              api_threads=a.api_threads)
    except ElastischedError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
