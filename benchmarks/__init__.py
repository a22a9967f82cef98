"""Performance measurements behind chapters 12-14 of "Attention, from scratch".

    python -m benchmarks            # everything (a few minutes on a 2-core CPU)
    python -m benchmarks --quick    # tiny sizes, seconds: checks that the scripts run
    make bench                      # the same as the first line, in the book's venv

Suites (``--suite`` picks some):

* ``attention``: implementations of one causal multi-head attention layer on the same
  inputs (Raschka's setting: batch 8, context 1024, width 768, 12 heads), then a sweep
  over the context length; GFLOP/s as a fraction of the measured matmul throughput.
* ``memory``: peak memory of the explicit, tiled and fused attention forward vs T.
* ``decoding``: greedy generation with and without the KV cache (a 5.8M-parameter
  LLaMA-like model, 128-token prompt, up to 256 new tokens); cache bytes per token.

Each prints a table and everything goes into one JSON file under
``benchmarks/results/`` (machine, torch version, every figure, every ratio to its
baseline, and the issue's performance targets with pass/fail). On a machine with CUDA
the suites run on the GPU as well.
"""
