"""Run a function in ``W`` local processes joined by ``torch.distributed``: several "devices" on one machine.

:func:`run_on_ranks` starts ``W`` processes with ``torch.multiprocessing`` (the ``spawn``
start method: each is a fresh Python, as on separate machines, and it works in Jupyter and
Colab), joins them in a process group over a free local TCP port (gloo on CPUs, NCCL with
one GPU per rank), calls the function in each, and returns what each rank returned. A
worker's exception comes back raised in the caller, with its rank in the message and the
worker's traceback as its cause; the other ranks are stopped rather than left waiting.

Spawned processes import the function by its module and name (``spawn`` pickles it by
reference): it must be a module-level function in an importable file, not a lambda, a
nested function or a function defined in a notebook.
"""

from __future__ import annotations

import datetime
import os
import pickle
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..checks import check_callable, check_choice, check_int, check_number

__all__ = ["run_on_ranks", "RemoteTraceback", "exception_with_rank", "free_port"]

BACKENDS = ("gloo", "nccl")
GRACE_SECONDS = 3.0  # after a rank fails, how long the others get to fail on their own (their errors say more)


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, attached as the cause of the one re-raised here."""

    def __str__(self) -> str:
        return "\n" + self.args[0]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the operating system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(index, fn, args, world_size, backend, port, timeout, threads, results):
    """One rank: join the group, call ``fn(*args)``, write ``("ok", value)`` or ``("error", ...)``, leave."""
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(index)
    path = os.path.join(results, f"rank{index}.pkl")
    try:
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=index,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
        value = fn(*args)
        try:
            payload = pickle.dumps(("ok", value))
        except Exception as e:  # whatever pickle raised: reported to the caller as this rank's error
            raise TypeError(f"the value returned by {fn.__qualname__} cannot be pickled: {e}") from e
        with open(path, "wb") as f:
            f.write(payload)
    except BaseException as error:
        # When it failed: a rank's failure makes its peers' collectives fail after it ("connection
        # closed by peer"); the earliest failure is the cause, the later ones its consequences.
        when, tb = time.time(), traceback.format_exc()
        try:
            payload = pickle.dumps(("error", error, tb, when))
            pickle.loads(payload)  # some exception classes pickle but cannot be rebuilt
        except Exception:  # such an exception comes back as its type's name and message
            payload = pickle.dumps(("error", RuntimeError(f"{type(error).__name__}: {error}"), tb, when))
        with open(path, "wb") as f:
            f.write(payload)
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _check_importable(fn) -> None:
    """Refuse a function that spawned processes could not import by name."""
    check_callable("fn", fn)
    qualname = getattr(fn, "__qualname__", repr(fn))
    main = sys.modules.get("__main__")
    interactive = getattr(fn, "__module__", None) == "__main__" and not getattr(main, "__file__", None)
    if "<lambda>" in qualname or "<locals>" in qualname or interactive:
        raise TypeError(
            f"fn={qualname} cannot be imported by the spawned processes (spawn pickles a function by its "
            f"module and name): define it at the top level of a .py module and import it from there"
        )


def exception_with_rank(error: BaseException, rank: int, others: Sequence[int] = ()) -> BaseException:
    """A worker's exception as the caller sees it: of its own type where it can be rebuilt, the rank in front.

    ``ValueError("bad")`` from rank 1 becomes ``ValueError("rank 1: bad")``; an exception whose
    class takes other arguments, or whose ``str`` is not its message (``KeyError`` quotes it),
    becomes ``RuntimeError("rank 1 raised KeyError: 'k'")``. Its ``rank`` attribute is set.

    Args:
        error: What the worker raised.
        rank: Its rank.
        others: Ranks that failed after it (named in the message).
    """
    also = f" (rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} failed too)" if others else ""
    message = f"rank {rank}: {error}{also}"
    try:
        raised = type(error)(message)
        if str(raised) != message:
            raise TypeError
    except Exception:  # an exception class with a constructor of its own: say its name instead
        raised = RuntimeError(f"rank {rank} raised {type(error).__name__}: {error}{also}")
    raised.rank = rank
    return raised


def run_on_ranks(
    fn: Callable,
    world_size: int,
    *args: object,
    backend: str = "gloo",
    timeout: float = 120.0,
    threads: int = 1,
) -> list:
    """Call ``fn(*args)`` in ``world_size`` spawned processes joined by ``torch.distributed``; return each result.

    Inside ``fn``, ``torch.distributed`` is initialised: ``dist.get_rank()`` is the rank,
    ``dist.get_world_size()`` the world size, and collectives reach the other processes.
    With ``backend="nccl"`` rank ``r`` uses ``cuda:r``. The process group is destroyed when
    ``fn`` returns or raises.

    Args:
        fn: A module-level function (see the module docstring); its return value must pickle.
        world_size: The number of processes.
        *args: Passed to ``fn`` in every process (pickled).
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (one GPU per rank).
        timeout: Seconds the whole run may take; also the process group's timeout, so
            that a collective that one rank never joins ends with an error.
        threads: ``torch.set_num_threads`` in each process (1: ``W`` processes share the
            machine's cores without oversubscribing them).

    Returns:
        The value ``fn`` returned on each rank, indexed by rank.

    Raises:
        TypeError: ``fn`` is not importable by name; bad argument types.
        ValueError: ``world_size < 1``, an unknown backend, fewer GPUs than ranks for NCCL.
        Exception: The exception of the rank that failed first (the others' failures, within a
            few seconds, are usually its consequences and are named in the message), as
            :func:`exception_with_rank` rebuilds it, the worker's traceback as its ``__cause__``.
        TimeoutError: The run took more than ``timeout`` seconds (the ranks still running named).
    """
    _check_importable(fn)
    world_size = check_int("world_size", world_size)
    check_choice("backend", backend, BACKENDS)
    timeout = check_number("timeout", timeout, low=0.0, low_open=True)
    threads = check_int("threads", threads)
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(
            f"backend='nccl' needs one GPU per rank: world_size={world_size}, {torch.cuda.device_count()} GPUs"
        )
    with tempfile.TemporaryDirectory(prefix="attn_core_ranks_") as results:
        worker_args = (fn, args, world_size, backend, free_port(), timeout, threads, results)
        context = mp.start_processes(_worker, args=worker_args, nprocs=world_size, join=False, start_method="spawn")
        processes = context.processes
        deadline, first_failure = time.monotonic() + timeout, None
        while True:
            running = [p for p in processes if p.exitcode is None]
            if any(p.exitcode not in (None, 0) for p in processes) and first_failure is None:
                first_failure = time.monotonic()
            now = time.monotonic()
            if not running or now > deadline or (first_failure is not None and now > first_failure + GRACE_SECONDS):
                break
            wait([p.sentinel for p in running], timeout=0.1)
        stopped = [rank for rank, p in enumerate(processes) if p.exitcode is None]
        for p in processes:
            if p.exitcode is None:
                p.terminate()
            p.join()
        outcomes = []
        for rank in range(world_size):
            path = os.path.join(results, f"rank{rank}.pkl")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    outcomes.append(pickle.load(f))
            else:
                outcomes.append(None)
    failed = sorted((o[3], rank) for rank, o in enumerate(outcomes) if o is not None and o[0] == "error")
    if failed:
        rank = failed[0][1]
        _, error, tb, _ = outcomes[rank]
        raise exception_with_rank(error, rank, [r for _, r in failed[1:]]) from RemoteTraceback(tb)
    lost = [rank for rank, o in enumerate(outcomes) if o is None and rank not in stopped]
    if lost:
        code = processes[lost[0]].exitcode
        raise RuntimeError(
            f"rank {lost[0]} exited with code {code} without a result (its output above says why: killed, out of "
            f"memory, or a script that calls run_on_ranks outside `if __name__ == '__main__':`, which spawn re-runs)"
        )
    if stopped:
        raise TimeoutError(f"run_on_ranks: ranks {stopped} were still running after timeout={timeout:g} s")
    return [o[1] for o in outcomes]
