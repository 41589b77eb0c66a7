"""The set of applications a run knows, built from bundled and user-supplied profiles."""

from __future__ import annotations

from pathlib import Path

from elastisched.core.errors import ConfigError
from elastisched.models.application import MAX_LOCAL_BSZ, POLLUX_EPOCHS, Application
from elastisched.models.profiles import AppProfile, load_pollux_bundled, load_sia, merge


class PerfModels:
    """Application name → `Application`. Policies receive it through `PolicyContext.perf`."""

    def __init__(self, profiles: dict[str, AppProfile], epochs: dict[str, int] | None = None,
                 restart_cost: dict[str, float] | float | None = None) -> None:
        epochs = {**POLLUX_EPOCHS, **(epochs or {})}
        self.apps: dict[str, Application] = {}
        for name, prof in profiles.items():
            # `restart_cost or 30.0` turned an explicit 0 into 30 s: only None means "the default"
            rc = restart_cost.get(name, 30.0) if isinstance(restart_cost, dict) else \
                (30.0 if restart_cost is None else float(restart_cost))
            max_ep = epochs.get(name, min(prof.epochs().values()))
            self.apps[name] = Application(prof, max_ep, rc, MAX_LOCAL_BSZ.get(name))

    @classmethod
    def load(cls, profiles_dir: str | Path | None = None, restart_cost: float | None = None) -> PerfModels:
        """Bundled Pollux (T4) profiles, plus Sia's per-GPU-type profiles when a directory is given."""
        profiles = load_pollux_bundled()
        if profiles_dir is not None:
            profiles = merge(profiles, load_sia(Path(profiles_dir)))
        return cls(profiles, restart_cost=restart_cost)

    def app(self, name: str) -> Application:
        try:
            return self.apps[name]
        except KeyError:
            raise ConfigError("application", name, f"no profile; known: {', '.join(sorted(self.apps))}") from None

    def __contains__(self, name: object) -> bool:
        return name in self.apps
