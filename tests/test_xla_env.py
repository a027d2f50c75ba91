"""The test session's XLA flags (`tests/xla_env.py`): a flag XLA does not know (XLA aborts
every process on one) is left out, not passed to every test's backend."""

from __future__ import annotations

import xla_env


def test_a_flag_xla_does_not_know_is_left_out(monkeypatch):
    monkeypatch.delenv(xla_env.KNOWN)
    monkeypatch.setattr(xla_env, "OPTIONAL", ("--xla_jaxattn_no_such_flag=true",))
    assert xla_env._test_flags() == xla_env.REQUIRED


def test_the_session_s_choice_is_made_once_and_inherited(monkeypatch):
    monkeypatch.setenv(xla_env.KNOWN, "--xla_a=1 --xla_b=2")
    monkeypatch.setattr(xla_env, "_known", lambda flags: 1 / 0)  # not probed again
    assert xla_env._test_flags() == ("--xla_a=1", "--xla_b=2")
