"""Policies from outside the package, and building any policy from a user's spec.

A spec names a policy three ways (DESIGN.md "plugin loading"): a registered name (built-in, or installed by a
package under the entry-point group `elastisched.policies`), `path/to/file.py:Class` (a file anywhere; `~` is
expanded, as a shell does not after a comma) or `package.module:Class` (importable from `sys.path`), each
optionally followed by `:key=value,...` options checked against what the policy declares
(`policies.options`). The CLI, the Python API and the sweep all build policies here, so a spec means the same
everywhere. Imported only when a spec is not a plain built-in name or carries options: `make_policy("fifo")`
never loads this module.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastisched.core.errors import ConfigError
from elastisched.policies.base import ORIGINS, Policy, is_registered, policy_class, unknown_policy_hint
from elastisched.policies.options import Option, PolicySpec, parse_spec, resolve

_FILE_CLASSES: dict[tuple[Path, str], type[Policy]] = {}


def _check_class(obj: Any, ref: str, where: str) -> type[Policy]:
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        raise ConfigError(where, ref, "not a policy class (subclass elastisched.policies.base.Policy)")
    if not obj.name:
        raise ConfigError(where, ref, "the class sets no `name` (a policy needs one for its results)")
    return obj


def _from_file(path_text: str, cls_name: str, ref: str, where: str) -> type[Policy]:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise ConfigError(where, ref, f"no such file: {path}")
    key = (path.resolve(), cls_name)
    if key in _FILE_CLASSES:
        return _FILE_CLASSES[key]
    digest = hashlib.sha256(str(key[0]).encode()).hexdigest()[:10]
    module_name = f"elastisched_plugin_{path.stem.replace('-', '_')}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, key[0])
    if spec is None or spec.loader is None:
        raise ConfigError(where, ref, "cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise ConfigError(where, ref, f"importing it failed: {type(e).__name__}: {e}"[:300]) from None
    cls = _check_class(getattr(module, cls_name, None), ref, where)
    _FILE_CLASSES[key] = cls
    ORIGINS.setdefault(cls.name, f"file {key[0]}")
    return cls


def _from_module(module_name: str, cls_name: str, ref: str, where: str) -> type[Policy]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(where, ref, f"cannot import {module_name!r}: {e}") from None
    cls = _check_class(getattr(module, cls_name, None), ref, where)
    ORIGINS.setdefault(cls.name, f"module {module_name}")
    return cls


def load_class(ref: str, where: str = "--policy") -> type[Policy]:
    """The policy class a spec's reference names (a registered name, `file.py:Class`, `package.module:Class`)."""
    target, sep, cls_name = ref.rpartition(":")
    if not sep:
        if not is_registered(ref):
            raise ConfigError(where, ref[:80], unknown_policy_hint(ref))
        return policy_class(ref)
    if not cls_name.isidentifier():
        raise ConfigError(where, ref, "expected NAME, path/file.py:Class or package.module:Class")
    if target.endswith(".py") or "/" in target:
        return _from_file(target, cls_name, ref, where)
    if all(part.isidentifier() for part in target.split(".")):
        return _from_module(target, cls_name, ref, where)
    raise ConfigError(where, ref, "expected NAME, path/file.py:Class or package.module:Class")


@dataclass(frozen=True)
class BuiltPolicy:
    """A policy made from a spec: the instance, the label its results go under, and its options."""

    policy: Policy
    label: str
    spec: str  # the reference and every option given (a file's included): builds the same policy elsewhere
    options: dict[str, Any]  # every declared option's value in this run (defaults included)
    given: dict[str, Any]  # the options the user set


def declared(cls: type[Policy]) -> tuple[Option, ...]:
    return cls.declared_options()


def build(spec: str | PolicySpec, extra: Mapping[str, Any] | None = None, where: str = "--policy"
          ) -> BuiltPolicy:
    """Instantiate a spec; `extra` are options from elsewhere (a `--policy-options` file, Python keywords),
    which the spec's own override. Unknown keys and bad values are one-line `ConfigError`s."""
    parsed = parse_spec(spec, where) if isinstance(spec, str) else spec
    cls = load_class(parsed.ref, where)
    options = declared(cls)
    given = {**resolve(options, dict(extra or {}), cls.name, where), **resolve(options, dict(parsed.options),
                                                                                cls.name, where)}
    try:
        policy = cls(**given)
    except (ValueError, TypeError) as e:
        shown = ",".join(f"{k}={v}" for k, v in given.items())
        raise ConfigError(where, f"{cls.name}:{shown}", str(e).splitlines()[0][:240] or type(e).__name__) from None
    shown = ":" + ",".join(f"{k}={_text(v)}" for k, v in given.items()) if given else ""
    values = {o.name: given.get(o.name, o.default) for o in options}
    return BuiltPolicy(policy, cls.name + shown, parsed.ref + shown, values, given)


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else "none" if value is None else f"{value:g}" \
        if isinstance(value, float) else str(value)
