"""What PyTorch runs inside a function: the peak memory of its tensors, its ATen operators,
the bytes its operators read and write, and what autograd saves for the backward pass.

Both tools watch every operator call through a ``TorchDispatchMode``. That API, and the
pytree helper used to walk operator outputs, live in private PyTorch modules
(``torch.utils._python_dispatch``, ``torch.utils._pytree``): this module is the one
place in ``attn_core`` that imports them, so that a PyTorch change breaks one module.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ...checks import check_callable

__all__ = ["peak_tensor_memory", "aten_ops", "launched_ops", "Traffic", "memory_traffic", "saved_tensor_bytes"]


class _LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of tensor storage created by PyTorch operators and still alive.

    Every operator call passes through :meth:`__torch_dispatch__`; each storage an
    output lives in is counted once, when first seen, and uncounted when the last
    tensor that points into it is garbage-collected (a ``weakref.finalize``). Storages
    first seen as *inputs* existed before the measurement and are never counted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # storage id -> [bytes, tensors alive]
        # Storages that existed before (inputs, weights): views of them cost nothing. The
        # reference keeps each alive, so that its address cannot be reused for a new one.
        self.external: dict[int, torch.UntypedStorage] = {}
        self.current = self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                # The storage's C++ address identifies it, also for views and meta tensors.
                if storage._cdata not in self.live:
                    self.external.setdefault(storage._cdata, storage)
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self.external:
                continue  # a view of (or an in-place write to) memory allocated before the call
            if key in self.live:
                self.live[key][1] += 1  # a view or an in-place result: no new memory
            else:
                self.live[key] = [storage.nbytes(), 1]
                self.current += storage.nbytes()
                self.peak = max(self.peak, self.current)
            weakref.finalize(t, self._release, key)
        return out


def peak_tensor_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Peak bytes of tensors that ``fn(*args, **kwargs)`` allocates and holds at the same time.

    The method: a ``TorchDispatchMode`` sees the output of every PyTorch operator that
    runs inside ``fn``; it adds a storage's size when the storage first appears and
    subtracts it when the last tensor using it is freed, and it records the maximum of
    that running sum. Tensors that exist before the call (the inputs, the weights) are
    not counted; the result is, while it is alive. Scratch memory *inside* a single
    fused kernel (e.g. the tile buffers of ``scaled_dot_product_attention``) is not
    visible: this measures what a Python-level algorithm allocates. Tensors kept by
    autograd for the backward pass stay alive, so call under ``torch.no_grad()`` to
    measure inference. Works on any device, including ``"meta"`` tensors (which
    allocate nothing, so even huge shapes can be measured instantly).

    Args:
        fn: The computation to measure.
        *args: Positional arguments for ``fn``.
        **kwargs: Keyword arguments for ``fn``.

    Returns:
        Peak live bytes, an int (the result is discarded).

    Raises:
        TypeError: ``fn`` is not callable.
    """
    check_callable("fn", fn)
    with _LiveTensorBytes() as tracker:
        result = fn(*args, **kwargs)
        del result
    return tracker.peak


class _OpRecorder(TorchDispatchMode):
    """Records the name of every ATen operator that runs (with ``computing_only``, of those that compute)."""

    def __init__(self, computing_only: bool = False) -> None:
        super().__init__()
        self.names: list[str] = []
        self.computing_only = computing_only

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # A view (transpose, slice, ...) only writes new metadata, and an operator whose result
        # is no tensor (promote_types, or reading one value with .item()) computes no tensor.
        # _unsafe_view (a matmul's reshape) is a view whose schema does not say so.
        view = func.is_view or func.overloadpacket is torch.ops.aten._unsafe_view
        computes = not view and any(isinstance(t, torch.Tensor) for t in tree_flatten(out)[0])
        if computes or not self.computing_only:
            self.names.append(func.overloadpacket.__name__)
        return out


def aten_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[str]:
    """The ATen operators that ``fn(*args, **kwargs)`` runs, in order (e.g. ``["mm", "_softmax", ...]``).

    Shows which kernel PyTorch picked: a fused ``scaled_dot_product_attention`` backend is
    one operator (``_scaled_dot_product_flash_attention_for_cpu`` on a CPU), the math
    backend a sequence of matmuls and a softmax.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    check_callable("fn", fn)
    with _OpRecorder() as recorder:
        fn(*args, **kwargs)
    return recorder.names


def launched_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[str]:
    """The ATen operators of ``fn(*args, **kwargs)`` that compute a tensor, in order: on a GPU, a kernel launch each.

    :func:`aten_ops` without the views (``view``, ``transpose``, ``slice``...: new metadata
    over the same memory, no kernel) and without the operators that return no tensor
    (``promote_types``; ``_local_scalar_dense``, the read behind ``.item()``). When a step
    does little arithmetic per operator (decoding one token at batch 1), its time on a GPU
    is mostly the host issuing these launches, so their number measures it on any device.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    check_callable("fn", fn)
    with _OpRecorder(computing_only=True) as recorder:
        fn(*args, **kwargs)
    return recorder.names


class Traffic(NamedTuple):
    """Bytes that operators read from and wrote to memory (see :func:`memory_traffic`)."""

    read: int
    written: int

    @property
    def total(self) -> int:
        """Bytes read plus bytes written."""
        return self.read + self.written


def _tensor_bytes(t: torch.Tensor) -> int:
    # The elements an operator touches; a broadcast (stride-0) view is read from a storage
    # no larger than itself, so count no more than the storage holds.
    return min(t.numel() * t.element_size(), t.untyped_storage().nbytes())


class _TrafficCounter(TorchDispatchMode):
    """Adds up the bytes each non-view operator reads (its tensor inputs) and writes (its outputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.read = self.written = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view:  # a view moves no data
            return out
        # Arguments the operator writes into (copy_'s destination, an out= tensor): written, not read.
        mutated = {a.name for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        names = [a.name for a in func._schema.arguments]
        for i, arg in enumerate(args):
            if not (i < len(names) and names[i] in mutated):
                self.read += sum(_tensor_bytes(t) for t in tree_flatten(arg)[0] if isinstance(t, torch.Tensor))
        for name, arg in kwargs.items():
            if name not in mutated:
                self.read += sum(_tensor_bytes(t) for t in tree_flatten(arg)[0] if isinstance(t, torch.Tensor))
        self.written += sum(_tensor_bytes(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        return out


def memory_traffic(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Traffic:
    """Bytes that the operators of ``fn(*args, **kwargs)`` read and write, operator by operator.

    Every ATen operator that PyTorch runs eagerly is one pass over memory: it reads its
    tensor inputs and writes its outputs (on a GPU: from and to HBM; the fast on-chip
    memory, SRAM, only lives *inside* one kernel). The count is that model: per
    operator, the bytes of its tensor inputs (read) and of its outputs (written); views
    (``view``, ``narrow``, ``transpose``...) move nothing and count nothing; an in-place
    operator's destination (``copy_``'s ``self``) counts as written, not read. What a fused
    kernel does inside itself is invisible: for it, the count is its inputs and outputs.
    Works on ``"meta"`` tensors, so large shapes cost nothing to count.

    Args:
        fn: The computation to count.
        *args: Positional arguments for ``fn``.
        **kwargs: Keyword arguments for ``fn``.

    Returns:
        :class:`Traffic` ``(read, written)`` in bytes.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    check_callable("fn", fn)
    with _TrafficCounter() as counter:
        fn(*args, **kwargs)
    return Traffic(counter.read, counter.written)


def saved_tensor_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Bytes that autograd keeps for the backward pass of ``fn(*args, **kwargs)``, beyond its inputs.

    Every operator that needs its inputs or outputs to compute gradients saves them on the
    graph (``torch.autograd.graph.saved_tensors_hooks`` sees each one). The count adds
    each saved storage once and leaves out the storages of the arguments (they exist
    anyway). The explicit attention path saves its ``(T_q, T_k)`` weights; a
    FlashAttention-style kernel saves only its output and one softmax statistic per query
    (the log-sum-exp), and recomputes the scores in the backward pass.

    Args:
        fn: The forward computation (its inputs should require gradients).
        *args: Positional arguments for ``fn``.
        **kwargs: Keyword arguments for ``fn``.

    Returns:
        Bytes saved for the backward pass, an int.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    check_callable("fn", fn)
    given = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in given:
            seen[storage._cdata] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn(*args, **kwargs)
    del result
    return sum(seen.values())
