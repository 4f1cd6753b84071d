"""Corpus mode: many documents → Parquet shards, on one machine or on a Ray cluster.

- ``command``: ``python -m rr_fast.corpus`` (its flags, its one-line errors, its exit statuses);
- ``files``: the records it reads and the output folder it writes (shards, errors, manifest, lock);
- ``run``: a run on one machine, with worker processes and a preparing helper on a GPU;
- ``ray``: the same run as a Ray Data pipeline (``--ray``), and ``chunk_dataset`` for a Ray ``Dataset``.
"""
