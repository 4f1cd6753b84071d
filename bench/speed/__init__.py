"""Speed benchmark of rr-fast against the paper-faithful per-edge loop (``python -m bench.speed``).

Modules:
    data        the timing text: Gutenberg passages, concatenated and cut to n tokens
    flops       FLOPs of the engine and of the per-edge loop, from the model's shape; matmul peak
    worker      one configuration in a fresh process (so peak memory is its own); prints JSON
    report      markdown tables from the workers' JSON
    cost_model  predicted source tokens/s for Qwen3-4B on an M3 Max-class GPU and an H100
    __main__    the command: runs the workers, prints the report, writes bench/out/speed.{md,json}
"""
