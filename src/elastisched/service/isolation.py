"""How the service runs jobs (issue 23): as each user's own Unix account (`users`) or as itself (`none`), with
which environment and interpreter, and how many queued jobs a user may have.

`auto` (the default) is `users` when the service runs as root and `none` otherwise. In `users` mode the
service refuses to start unless an account other than its own can run the job interpreter and import the
package (`backends.identity.probe`): a private interpreter would otherwise fail every job. What `none` cannot
promise is in docs/security.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elastisched.backends.identity import IdentityError, JobUsers, can_switch_users, probe, read_user_map
from elastisched.backends.job_env import JobEnv, parse_job_env
from elastisched.core.errors import ConfigError

MODES = ("auto", "users", "none")
DEFAULT_MAX_QUEUED = 1000


@dataclass(frozen=True)
class JobsConfig:
    """`--isolation`, `--user-map`, `--create-job-users`, `--job-env`, `--job-python`, `--max-queued-per-user`."""

    isolation: str = "auto"
    user_map: str | None = None
    create_users: bool = False
    job_env: tuple[str, ...] = ()
    python: str | None = None
    max_queued: int = DEFAULT_MAX_QUEUED

    def mode(self, backend: str = "local") -> str:
        """`users` or `none` (what `auto` means here), or a ConfigError for a combination that cannot work. The
        Ray backend runs every job as its nodes' account: `none` here (docs/security.md, "Ray and Slurm")."""
        if self.isolation not in MODES:
            raise ConfigError("--isolation", self.isolation, f"must be one of {', '.join(MODES)}")
        if self.max_queued < 1:
            raise ConfigError("--max-queued-per-user", self.max_queued, "must be at least 1")
        mode = self.isolation
        if backend != "local" and mode == "users":
            raise ConfigError("--isolation", "users", f"the {backend} backend runs every job as the account of its "
                              "nodes, not as each user's (docs/security.md)")
        if mode == "auto":
            mode = "users" if can_switch_users() and backend == "local" else "none"
        if mode == "users" and not can_switch_users():
            raise ConfigError("--isolation", "users", "the service must run as root to start jobs as other accounts "
                              "(docs/security.md: what a deployment without it can and cannot promise)")
        if mode == "none" and (self.create_users or self.user_map):
            flag = "--create-job-users" if self.create_users else "--user-map"
            raise ConfigError(flag, "", "needs --isolation users (jobs run as the service's account in mode none)")
        return mode

    def runtime(self, mode: str, python: str, work: Path) -> tuple[JobUsers, JobEnv]:
        """The account map and the jobs' base environment; in mode `users`, checked by a probe."""
        import os

        try:
            allow, fixed = parse_job_env(self.job_env)
            users = JobUsers(mode, read_user_map(self.user_map) if self.user_map else None, self.create_users)
        except (ValueError, IdentityError) as e:
            raise ConfigError("--job-env" if isinstance(e, ValueError) else "--user-map", "", str(e)) from None
        env = JobEnv(os.environ, allow, fixed)
        if mode == "users":
            jobs_dir = work / "jobs"
            jobs_dir.mkdir(mode=0o711, exist_ok=True)
            jobs_dir.chmod(0o711)
            why = probe(python, env.build({}, {}, home="/", user=None), jobs_dir)
            if why:
                raise ConfigError("--job-python", python, f"an account other than the service's cannot run jobs with "
                                  f"it ({why}); install elastisched where every account can read it (each directory "
                                  "on the way o+x), name another interpreter with --job-python, or run with "
                                  "--isolation none (docs/security.md)")
        return users, env
