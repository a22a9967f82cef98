"""tests/perturb/sitecustomize.py: the perturbed lessons run nudges every optimizer's parameters."""

import os
import pathlib
import subprocess
import sys

import pytest

HOOK = pathlib.Path(__file__).parent / "perturb"

SCRIPT = """
import torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
before = [p.detach().clone() for p in m.parameters()]
state = torch.get_rng_state()
torch.optim.AdamW(m.parameters(), lr=0.1)
torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1)
rel = max(((p - b).abs() / b.abs().clamp_min(1e-12)).max().item() for p, b in zip(m.parameters(), before))
print(rel, torch.equal(state, torch.get_rng_state()), torch.rand(1).item())
"""


def _run(env_extra):
    env = {k: v for k, v in os.environ.items() if k not in ("ATTN_CORE_PERTURB", "PYTHONPATH")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    rel, rng_same, draw = out.stdout.split()
    return float(rel), rng_same == "True", float(draw)


def test_without_the_variable_nothing_changes():
    rel, rng_same, _ = _run({"PYTHONPATH": str(HOOK)})
    assert rel == 0.0 and rng_same


def test_the_nudge_is_relative_seeded_and_leaves_the_global_rng_alone():
    plain = _run({})
    rel, rng_same, draw = _run({"PYTHONPATH": str(HOOK), "ATTN_CORE_PERTURB": "1e-6"})
    assert 1e-7 < rel < 1e-5  # about 1e-6 relative, not zero and not large
    assert rng_same and draw == plain[2]  # the lesson's own random draws are unchanged
    assert _run({"PYTHONPATH": str(HOOK), "ATTN_CORE_PERTURB": "1e-6"})[0] == rel  # reproducible


def test_a_malformed_value_fails_at_start_up():
    env = dict(os.environ, PYTHONPATH=str(HOOK), ATTN_CORE_PERTURB="tiny")
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, check=True)
