"""The lazy policy registry: `policies.BUILTIN` names every built-in policy's module, a policy is found by
name after importing its module alone, and the set of names equals what the modules register."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from elastisched.core.errors import UnknownPolicyError
from elastisched.policies import BUILTIN
from elastisched.policies.base import is_registered, make_policy, registered, unknown_policy_hint


def test_table_matches_what_the_modules_register() -> None:
    assert sorted(BUILTIN) == sorted(registered())


def test_each_name_points_at_the_module_that_registers_it() -> None:
    for name, cls in registered().items():
        assert cls.__module__ == f"elastisched.policies.{BUILTIN[name]}", name  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["tiresias", "jabas_scaled"])
def test_a_policy_is_made_from_its_own_module(name: str) -> None:
    code = (f"import json, sys; from elastisched.policies.base import make_policy; p = make_policy({name!r});"
            f" assert p.name == {name!r}, p.name;"
            " print(json.dumps(sorted(m for m in sys.modules if m.startswith('elastisched.policies.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    loaded = {m.removeprefix("elastisched.policies.") for m in json.loads(out.stdout)} & set(BUILTIN.values())
    # its own module, and the one it builds on (jabas_scaled subclasses jabas), never every policy
    assert loaded == {"tiresias": {"tiresias.policy"},
                      "jabas_scaled": {"jabas.scaled", "jabas.policy"}}[name]


def test_unknown_name_still_lists_every_policy() -> None:
    assert not is_registered("tiresia")
    hint = unknown_policy_hint("tiresia")
    assert "did you mean 'tiresias'" in hint
    assert all(n in hint for n in BUILTIN)
    with pytest.raises(UnknownPolicyError, match="did you mean 'tiresias'"):
        make_policy("tiresia")


def test_package_attribute_imports_the_module() -> None:
    import elastisched.policies as pkg

    assert pkg.fifo.__name__ == "elastisched.policies.fifo"
    with pytest.raises(AttributeError):
        _ = pkg.no_such_policy
