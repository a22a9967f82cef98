"""The perturbed lessons run: every optimizer nudges the parameters it trains when created.

Another CPU sums floating-point numbers in another order, and training amplifies the
difference; a lesson's trained claim must not depend on one machine's bits. This file
simulates that directly. ``make lessons`` runs the notebooks a third time with
``PYTHONPATH=tests/perturb`` (so that Python imports this ``sitecustomize`` at start-up, in
every process: nbval's kernels included) and ``ATTN_CORE_PERTURB=1e-6``. Then, each time a
``torch.optim.Optimizer`` (any subclass: SGD, Adam, AdamW, ... and the book's ``train``) is
created, every floating-point parameter it trains is multiplied by ``1 + eps * n`` with
``n`` standard normal: a relative nudge of about ``eps``.

The noise comes from a generator of its own, seeded by the optimizer's creation count, so
the global random state the lesson relies on (``torch.manual_seed``) is untouched and the
run is reproducible. Without ``ATTN_CORE_PERTURB`` nothing is patched. torch is not imported
here: the patch is applied when ``torch.optim.optimizer`` is first imported, so start-up
costs nothing for processes that never use torch.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_ENV = "ATTN_CORE_PERTURB"
_TARGET = "torch.optim.optimizer"


def _patch(module) -> None:
    import torch

    eps = float(os.environ[_ENV])
    original = module.Optimizer.__init__
    created = [0]  # optimizers created so far in this process: the seed of the next nudge

    def __init__(self, params, *args, **kwargs):
        original(self, params, *args, **kwargs)
        if getattr(self, "_attn_core_nudged", False):  # a subclass calling super().__init__ twice
            return
        self._attn_core_nudged = True
        gen = torch.Generator().manual_seed(1_000_003 * created[0] + 17)
        created[0] += 1
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if not p.is_floating_point():
                        continue
                    noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
                    p.mul_((1 + eps * noise).to(dtype=p.dtype, device=p.device))

    __init__.__wrapped__ = original
    module.Optimizer.__init__ = __init__


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of ``torch.optim.optimizer`` to patch it."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)  # let the ordinary finders locate the real module
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if os.environ.get(_ENV):
    try:
        float(os.environ[_ENV])
    except ValueError:
        # site.py would print an ordinary exception and carry on unperturbed: exit instead,
        # so that a typo fails the run at start-up rather than passing it unperturbed.
        sys.exit(f"{_ENV}={os.environ[_ENV]!r} is not a number (the relative size of the nudge, e.g. 1e-6)")
    sys.meta_path.insert(0, _PatchOnImport())
