"""Corpus chunking on a Ray cluster (``pip install "rr-fast[ray]"``): a Ray Data pipeline.

    read_parquet / read_json  →  map_batches(ChunkActor, ActorPoolStrategy, num_gpus per actor)  →  write_parquet

``chunk_dataset`` takes and returns a ``ray.data.Dataset``; ``python -m rr_fast.corpus INPUT... --output DIR
--ray auto|ADDRESS`` runs the whole pipeline on an existing cluster. Each actor loads the model once and
chunks its batches with ``Chunker.chunk_many``, so the rows equal the single-machine run's. Ray is imported
only when this module is used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rr_fast.corpus import COLUMNS, Document, RunConfig, chunk_documents, chunk_rows, error_reason, read_documents
from rr_fast.errors import RRFastError

RAY_HINT = 'rr_fast.ray needs Ray Data: pip install "rr-fast[ray]"'


def _ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise ImportError(RAY_HINT) from None
    return ray


class ChunkActor:
    """A Ray Data actor: loads the model once, then chunks each batch of documents into chunk rows.

    Documents that cannot be chunked become one row with ``error`` set and the chunk columns null.
    """

    def __init__(self, chunker: dict, id_field: str = "id", text_field: str = "text", threads: int | None = None):
        from rr_fast.chunker import Chunker

        if threads:
            import torch

            torch.set_num_threads(threads)
        self.chunker = Chunker(**chunker)
        self.id_field, self.text_field = id_field, text_field

    def __call__(self, batch):
        import pyarrow as pa

        ids = batch.column(self.id_field).to_pylist()
        texts = batch.column(self.text_field).to_pylist()
        documents = []
        for doc_id, text in zip(ids, texts):
            if doc_id is None:
                documents.append(Document("", None, f"no {self.id_field!r} field"))
            elif not isinstance(text, str):
                documents.append(Document(str(doc_id), None, f"field {self.text_field!r} is missing or not a string"))
            else:
                documents.append(Document(str(doc_id), text))
        rows = []
        for document, result in chunk_documents(self.chunker, documents):
            if isinstance(result, RRFastError):
                rows.append({"doc_id": document.doc_id, "error": error_reason(document, result)})
            else:
                rows.extend(dict(row, error=None) for row in chunk_rows(document.doc_id, result))
        return pa.Table.from_pylist(rows, schema=output_schema())


def output_schema():
    import pyarrow as pa

    from rr_fast.corpus import schema

    return schema().append(pa.field("error", pa.string()))


def chunk_dataset(
    dataset: Any,
    chunker: dict | None = None,
    *,
    id_field: str = "id",
    text_field: str = "text",
    actors: int | None = None,
    num_gpus: float = 0,
    cpus_per_actor: float = 1,
    batch_size: int = 64,
) -> Any:
    """Chunk a ``ray.data.Dataset`` of documents (``id_field``, ``text_field`` columns) into a Dataset of
    chunk rows (rr_fast.corpus.COLUMNS plus ``error``, set on one row per document that failed).

    chunker: Chunker keyword arguments (ChunkerConfig fields; ``limits`` may be a dict). actors: the actor
    pool's size (default: the cluster's GPUs when num_gpus > 0, else its CPUs divided by cpus_per_actor). A
    pool that holds every CPU leaves none for reading: materialize ``dataset`` first, or size the pool below
    the cluster.
    """
    ray = _ray()
    from ray.data import ActorPoolStrategy

    options = dict(chunker or {})
    if actors is None:
        resources = ray.cluster_resources()
        actors = (
            int(resources.get("GPU", 0) // num_gpus) if num_gpus else int(resources.get("CPU", 1) // cpus_per_actor)
        )
    dataset = dataset.select_columns([id_field, text_field])
    return dataset.map_batches(
        ChunkActor,
        fn_constructor_kwargs={
            "chunker": options,
            "id_field": id_field,
            "text_field": text_field,
            "threads": max(1, int(cpus_per_actor)),
        },
        batch_format="pyarrow",
        batch_size=batch_size,
        compute=ActorPoolStrategy(size=max(1, actors)),
        num_gpus=num_gpus,
        num_cpus=cpus_per_actor,
    )


def read_dataset(inputs: list[str], id_field: str, text_field: str) -> Any:
    """JSONL and Parquet through Ray's readers (parallel, on the cluster); folders are read here."""
    ray = _ray()
    parts = []
    for name in inputs:
        path = Path(name)
        where = name if "://" in name else str(path.resolve())  # URLs (s3://, gs://) go to Ray as they are
        if path.suffix == ".parquet":
            parts.append(ray.data.read_parquet(where))
        elif path.suffix in (".jsonl", ".json", ".ndjson"):
            parts.append(ray.data.read_json(where, lines=True))
        elif path.is_dir():
            rows = [{id_field: d.doc_id, text_field: d.text} for d in read_documents([name]) if d.error is None]
            parts.append(ray.data.from_items(rows))
        else:
            raise RRFastError(f"input not found or not .jsonl, .parquet or a folder: {name}")
    dataset = parts[0]
    return dataset.union(*parts[1:]) if len(parts) > 1 else dataset


def run_on_ray(config: RunConfig, address: str = "auto", resume: bool = False, num_gpus: float | None = None) -> dict:
    """The corpus command on Ray: chunk files to ``config.output`` (Parquet, errors.jsonl, manifest.json)."""
    ray = _ray()
    if resume:
        raise RRFastError("--resume is not available with --ray (Ray retries failed tasks itself)")
    output = Path(config.output)
    if output.exists() and any(output.iterdir()):
        raise RRFastError(f"{output} is not empty: pick another --output")
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    if num_gpus is None:
        num_gpus = 1 if ray.cluster_resources().get("GPU", 0) and config.chunker.get("device") != "cpu" else 0
    # read first: an actor pool holding every CPU would otherwise starve the read tasks (a deadlock on small clusters)
    dataset = read_dataset(list(config.inputs), config.id_field, config.text_field).materialize()
    chunked = chunk_dataset(
        dataset, config.chunker, id_field=config.id_field, text_field=config.text_field, num_gpus=num_gpus
    ).materialize()
    chunks = chunked.filter(lambda row: row["error"] is None).select_columns(list(COLUMNS))
    errors = chunked.filter(lambda row: row["error"] is not None).take_all()
    output.mkdir(parents=True, exist_ok=True)
    chunks.write_parquet(str((output / "chunks").resolve()))
    (output / "errors.jsonl").write_text(
        "".join(json.dumps({"doc_id": e["doc_id"], "reason": e["error"]}, ensure_ascii=False) + "\n" for e in errors)
    )
    documents = chunked.unique("doc_id")
    manifest = {
        "status": "complete",
        "run": config.manifest_key() | {"ray": address},
        "documents": len(documents),
        "chunks": chunks.count(),
        "errors": len(errors),
        "columns": list(COLUMNS),
        "chunks_folder": "chunks",
    }
    (output / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
