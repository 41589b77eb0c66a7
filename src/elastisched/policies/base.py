"""The Policy protocol and its registry (DESIGN.md "Interfaces").

A policy is a pure function of (snapshot, ctx, its own explicit state). It never performs I/O, never looks at
the clock, and never knows whether the simulator or the live service drives it. State that must survive a
service restart (Tiresias queues, ONES population) goes through `state_dict` / `load_state_dict`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from elastisched.core.enums import LengthKnowledge
from elastisched.core.errors import UnknownPolicyError
from elastisched.core.types import ClusterSnapshot, Decision, JobId, JobSpec
from elastisched.models.registry import PerfModels

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from elastisched.policies.options import Option

#: the entry-point group an installed package lists its policies under (`name = "package.module:Class"`)
ENTRY_POINT_GROUP = "elastisched.policies"


@dataclass(slots=True)
class PolicyContext:
    """Side inputs of a round: performance models, a seeded RNG, free-form options.

    `perf` is the registry a body may pass instead of filling `JobView.model`; policies read a job's model
    through `_common.job_model`, which prefers the view's."""

    perf: PerfModels | None = None
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)


class Policy:
    """Base class with no-op hooks. Subclasses set `name`, `description`, `interval` and `schedule`.

    Hook contract (`on_submit`, `on_finish`): only the engine calls them (`engine.loop.Engine.submitted` /
    `ended`), in both bodies, so a policy learns the same facts in the simulator and the live service:
    - `on_submit` when a job enters the system: the simulator at its arrival, the service the first time the
      daemon reads the job's row; before the first round that sees the job. Once per job and engine.
    - `on_finish` when a job leaves for good: finished, failed with no retry left, or cancelled; before the
      next round. Once per end.
    - Both must be idempotent: a restarted service announces every active job again (`on_submit` on a
      restored state) and ends again the jobs that ended after its saved state was taken (`on_finish`, also for
      a job the restored state never held). A job suspended, preempted or held by its user has not ended.
    - What a policy keeps per job (and saves in `state_dict`) is bounded by the active jobs: drop it in
      `on_finish`. What it learns across jobs (fitted models, statistics) must be bounded by the policy itself.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: periodic rounds in seconds; None = rounds only on events (arrival, completion, node change)
    interval: ClassVar[float | None] = None
    #: True if the policy may change a job's batch size / GPU count beyond its request
    elastic: ClassVar[bool] = False
    #: False if the policy never reads progress/epoch of running jobs: the simulator then skips refreshing them
    needs_progress: ClassVar[bool] = True
    #: True if a round in which no job is pending and no server is to be returned decides nothing: every running
    #: job keeps its allocation, no reasons, no hint, and the policy's state does not change (FIFO). A body may
    #: then skip consulting it (the simulator still counts the round and records its timeline row)
    idle_without_pending: ClassVar[bool] = False
    #: True if a job left waiting for RESOURCES blocks every job behind it, and a round decides from the pending
    #: jobs in submission order, the free GPUs per type and the node set alone, with no state of its own (FIFO):
    #: after a round that left a job waiting for RESOURCES and started nothing else than launches, a round whose
    #: only news are arrivals (no GPU freed, no job ended or stopped, the same nodes, no server to return) walks to
    #: the same job, which fits no better, and decides nothing new. A body may then skip consulting it (as above)
    idle_while_blocked: ClassVar[bool] = False
    #: True if a batch-size change on an unchanged placement happens inside the running job, between steps, as
    #: AdaptDL's adaptive batch size does: the simulator then charges `SimConfig.reconfigure_cost` (default 0)
    #: instead of a restart (Pollux)
    batch_in_place: ClassVar[bool] = False
    #: True if the policy cannot schedule a job without its performance model (no model-free fallback; it then
    #: raises ConfigError naming the job, `_common.require_model`): the live service refuses submissions that
    #: name no profiled application
    needs_perf_models: ClassVar[bool] = False
    #: what the policy reads about a job's length (`elastisched policies` shows it): nothing, the declared length
    #: (`JobView.declared_work`), or the true remaining work (`JobView.total_work`, an oracle)
    knows_length: ClassVar[LengthKnowledge] = LengthKnowledge.NOTHING
    #: one line of help per constructor option (`elastisched policies NAME` lists them)
    option_help: ClassVar[dict[str, str]] = {}
    #: allowed values of options whose annotation is a plain `str` (a `Literal` alias gives its own)
    option_choices: ClassVar[dict[str, tuple[Any, ...]]] = {}

    @classmethod
    def declared_options(cls) -> tuple[Option, ...]:
        """The options a user may set (`-p NAME:key=value`): the plain-valued keyword parameters of the
        constructor, with `option_help` and `option_choices` (`policies.options`)."""
        from elastisched.policies.options import options_from_signature

        return options_from_signature(cls, cls.option_help, cls.option_choices)

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        raise NotImplementedError

    def on_submit(self, spec: JobSpec, now: float) -> None:
        """A job entered the system at `now` (engine-called, before the next round; idempotent: see the class)."""

    def on_finish(self, job_id: JobId, now: float) -> None:
        """A job ended for good at `now`: finished, failed or cancelled (engine-called, before the next round;
        idempotent, also for a job never announced: see the class)."""

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state the live service saves (after rounds that act and after job ends) and restores at
        start; per-job parts hold only active jobs."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned, into a freshly constructed policy."""
        if state:
            raise ValueError(f"policy {self.name!r} keeps no state, got keys {sorted(state)}")


_REGISTRY: dict[str, Callable[..., Policy]] = {}
#: where a registered policy came from when it is not built in: "entry point DIST (VALUE)", a file or a module
ORIGINS: dict[str, str] = {}
#: installed entry points that failed to load: name -> the error (`elastisched policies` shows them)
BROKEN_ENTRY_POINTS: dict[str, str] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make the policy available by `cls.name` (CLI, service, conformance tests)."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"policy name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


_ALL_LOADED: list[bool] = []


def _load_builtin() -> None:
    """Import every module of the package and of its wings (once): each built-in policy registers itself
    (discovery, not a dependency)."""
    if _ALL_LOADED:
        return
    import importlib
    import pkgutil

    import elastisched.policies as pkg

    for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}."):
        leaf = m.name.rpartition(".")[2]
        if not m.ispkg and not leaf.startswith("_") and m.name != f"{pkg.__name__}.base":
            importlib.import_module(m.name)
    _ALL_LOADED.append(True)


def _load(name: str) -> None:
    """Register policy `name` by importing its module alone when it is a known built-in, else every module."""
    if name in _REGISTRY:
        return
    import importlib

    import elastisched.policies as pkg

    module = pkg.BUILTIN.get(name)
    if module is not None:
        importlib.import_module(f"{pkg.__name__}.{module}")
    if name not in _REGISTRY:
        _load_builtin()
    if name not in _REGISTRY:
        _load_entry_point(name)


def _entry_points() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_entry_point(name: str, ep: EntryPoint | None = None) -> None:
    """Register the installed policy `name` (entry-point group `elastisched.policies`); a failure is kept in
    `BROKEN_ENTRY_POINTS` and shown, not raised, so one broken package does not hide the others."""
    ep = ep or _entry_points().get(name)
    if ep is None or name in _REGISTRY:
        return
    try:
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Policy)):
            raise TypeError(f"{ep.value} is not a subclass of elastisched.policies.base.Policy")
        if cls.name != name:
            raise ValueError(f"{ep.value}.name is {cls.name!r}, the entry point names it {name!r}")
        register(cls)
    except Exception as e:  # a plug-in's import can raise anything
        BROKEN_ENTRY_POINTS[name] = f"{type(e).__name__}: {e}"[:300]
        return
    dist = getattr(ep, "dist", None)
    ORIGINS[name] = f"entry point {dist.name if dist else '?'} ({ep.value})"


def is_registered(name: str) -> bool:
    """Whether `make_policy(name)` will find a policy (imports that policy's module alone when it is a built-in,
    every policy module when the name is unknown)."""
    _load(name)
    return name in _REGISTRY


def registered(plugins: bool = True) -> dict[str, Callable[..., Policy]]:
    """Every built-in policy and (with `plugins`) every installed one (entry points), by name."""
    _load_builtin()
    if plugins:
        for name, ep in _entry_points().items():
            _load_entry_point(name, ep)
    return dict(sorted(_REGISTRY.items()))


def policy_class(name: str) -> type[Policy]:
    """The registered class of policy `name` (built-in or installed)."""
    _load(name)
    try:
        return _REGISTRY[name]  # type: ignore[return-value]
    except KeyError:
        raise UnknownPolicyError(f"{name!r}: {unknown_policy_hint(name)}") from None


def origin(name: str) -> str:
    """'built-in', or where a plug-in policy came from."""
    return ORIGINS.get(name, "built-in")


def unknown_policy_hint(name: str) -> str:
    """'did you mean …?' (the closest registered names) and the list of known ones."""
    import difflib

    registered()
    close = difflib.get_close_matches(name, list(_REGISTRY), n=2, cutoff=0.6)
    guess = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"unknown policy; {guess}known: {', '.join(sorted(_REGISTRY))}"


def make_policy(name: str, **options: Any) -> Policy:
    """Instantiate a registered policy (built in or installed) by name with Python keyword options as given;
    unknown names get a 'did you mean' and the known ones. A user's spec (`gavel:objective=las`,
    `file.py:Class`, `package.module:Class`) goes through `policies.plugins.build`, which checks the options."""
    _load(name)
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError(f"{name!r}: {unknown_policy_hint(name)}") from None
    return factory(**options)
