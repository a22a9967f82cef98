"""Attention across processes with ``torch.distributed``: context parallelism (floor 2).

The sequence is cut into one shard per rank and attention is computed over all of it,
each rank holding only its shard; the result equals one-device :func:`attn_core.attention`.

* :mod:`.launch`: :func:`~.launch.run_on_ranks`, a function run in ``W`` spawned local
  processes joined by a process group (gloo on CPUs, NCCL on GPUs), each rank's result
  returned and a worker's exception re-raised with its rank.
* :mod:`.sharding`: cutting a sequence into shards (contiguous or zig-zag) and joining them.
* :mod:`.ring`: ring attention, key/value blocks passed around the ring, merged with the
  online softmax (:mod:`attn_core.ops.partial`), causal blocks skipped by global position.
* :mod:`.ulysses`: DeepSpeed-Ulysses, all-to-all from a sequence split to a head split and back.
* :mod:`.allgather`: Llama 3's all-gather of the keys and values, then local attention.
* :mod:`.comm`: the communication (``batch_isend_irecv``, ``all_to_all``, ``all_gather``),
  each call counting its bytes into :mod:`.cost`; :mod:`.formulas`: what each scheme
  should cost, to compare; :mod:`.measure`: every scheme run in spawned processes, each
  rank's bytes, scores and error against one device (a worker a notebook can import).
* :mod:`.checks`: arguments checked on every rank and compared across ranks before any
  data moves, so that bad input raises on every rank instead of hanging one.

Imports :mod:`attn_core.ops` and :mod:`attn_core.checks`, nothing else of the package;
no model layer uses it.
"""
