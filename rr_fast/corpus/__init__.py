"""Corpus mode: many documents → Parquet shards, on one machine or on a Ray cluster.

- ``command``: ``python -m rr_fast.corpus`` (its flags, its one-line errors, its exit statuses);
- ``inputs``: the documents it reads (JSONL, Parquet, folders) and the guards that keep a folder's reading inside it;
- ``shards``: the rows of chunked documents and the shard files they are written to;
- ``manifest``: the run's configuration and ``manifest.json``, what ``--resume`` checks before keeping a shard;
- ``lock``: the lock that lets one run at a time write an output folder;
- ``run``: a run on one machine, with worker processes and a preparing helper on a GPU;
- ``ray``: the same run as a Ray Data pipeline (``--ray``), and ``chunk_dataset`` for a Ray ``Dataset``.
"""
