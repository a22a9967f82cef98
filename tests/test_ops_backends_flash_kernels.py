"""attn_core.ops.backends.flash_kernels: the interpreter is chosen before the kernels are defined; the kernels by name.

The kernels' values and gradients against attention() are tested through their launches in
tests/test_ops_backends_flash.py.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest
import torch

from attn_core.ops.backends import flash as flash_module
from attn_core.ops.backends import flash_kernels

needs_triton = pytest.mark.skipif(flash_kernels.triton is None, reason="triton is not installed: pip install triton")


@needs_triton
def test_module_chose_the_interpreter_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA is present: the kernels are compiled")
    assert os.environ.get("TRITON_INTERPRET") == "1"
    assert flash_kernels.INTERPRETED
    assert flash_module.default_blocks() == (32, 32)


def test_interpreter_is_chosen_before_torch_imports_triton():
    """torch.utils.flop_counter imports triton: attn_core must pick the interpreter first.

    Triton's library functions (tl.cdiv, tl.sigmoid) are defined when triton is imported;
    imported before TRITON_INTERPRET=1 they are compiled functions that an interpreted
    kernel cannot call (the unit suite met this when an exercise module imported the FLOP
    counter before attn_core.ops.backends.flash). Importing attn_core first must be enough; importing
    triton first must give a clear error, not one from inside a kernel launch.
    """
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("compiled kernels on a GPU: the interpreter is not used")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    first_attn_core = (
        "import attn_core, torch.utils.flop_counter, torch\n"
        "from attn_core.ops.backends.flash import flash_attention\n"
        "q = torch.randn(1, 1, 5, 16)\n"
        "o = flash_attention(q, q, q, is_causal=True)\n"
        "r = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)\n"
        "assert (o - r).abs().max() < 1e-5\n"
    )
    done = subprocess.run([sys.executable, "-c", first_attn_core], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    first_triton = (
        "import torch.utils.flop_counter, torch\n"
        "from attn_core.ops.backends.flash import flash_attention\n"
        "q = torch.randn(1, 1, 5, 16)\n"
        "flash_attention(q, q, q)\n"
    )
    done = subprocess.run([sys.executable, "-c", first_triton], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "import attn_core first" in done.stderr, done.stderr


def test_kernels_by_name_are_the_decorated_triton_functions():
    assert sorted(flash_kernels.KERNELS) == [
        "allowed", "backward_dkdv", "backward_dq", "forward", "key_range", "query_range"
    ]  # fmt: skip
    for name, fn in flash_kernels.KERNELS.items():
        source = inspect.getsource(getattr(fn, "fn", fn))
        assert source.startswith("@_jit\ndef _"), name
        assert source == flash_module.kernel_source(name)
    assert isinstance(flash_kernels.INTERPRETED, bool)
    assert not flash_kernels.LATE_INTERPRETER, "attn_core chose the interpreter before triton was imported"
