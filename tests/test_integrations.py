"""Each framework adapter inside its framework's own pipeline, with a tiny model and with the bundled one.

The texts repeat sentences on purpose: a `find`-based offset lands on the first occurrence, exact ones don't.
"""

from __future__ import annotations

import gc
import pickle
import subprocess
import sys

import pytest

from rr_fast.models.recipes import DEFAULT_MODEL

SENTENCES = (
    "The tide came in slowly over the flats. ",
    "Gulls argued over a crab near the old pier. ",
    "A fishing boat rounded the point and cut its engine. ",
    "Inside the harbour office the radio crackled with the evening forecast. ",
)
# The same paragraph three times: every chunk's text also occurs earlier in the document.
TEXT = "".join(SENTENCES) * 3
OTHER = "Repeated words repeated words repeated words. " * 12
SMALL = {"min_tokens": 8, "max_tokens": 40, "target_tokens": 24, "backend": "torch"}
# The bundled model with short texts: a few hundred tokens, so CI stays fast.
BUNDLED = {"min_tokens": 16, "max_tokens": 64, "target_tokens": 40, "backend": "torch"}


def exact(text: str, start: int, end: int, content: str) -> bool:
    return text[start:end] == content


# LangChain


def test_langchain_split_documents_has_exact_offsets(tiny):
    from langchain_core.documents import Document

    from rr_fast.integrations.langchain import RRTextSplitter

    splitter = RRTextSplitter(model=tiny, **SMALL)
    docs = [Document(page_content=TEXT, metadata={"source": "a"}), Document(page_content=OTHER, metadata={})]
    out = splitter.split_documents(docs)
    first = [d for d in out if d.metadata.get("source") == "a"]
    assert "".join(d.page_content for d in first) == TEXT and len(first) >= 4
    for d in first:
        assert exact(TEXT, d.metadata["start_index"], d.metadata["end_index"], d.page_content)
    # the base class's guess (find from the previous chunk) would put a repeated chunk on its first occurrence
    repeated = [d for d in first if TEXT.find(d.page_content) != d.metadata["start_index"]]
    assert repeated, "the test text must contain a chunk whose first occurrence is earlier"
    assert splitter.split_text(TEXT) == [d.page_content for d in first]
    assert splitter.split_text("  ") == []


def test_langchain_bundled_model():
    from langchain_core.documents import Document

    from rr_fast.integrations.langchain import RRTextSplitter

    out = RRTextSplitter(**BUNDLED, overlap=12).split_documents([Document(page_content=TEXT)])
    assert "".join(d.page_content for d in out) == TEXT and len(out) >= 2
    assert all(exact(TEXT, d.metadata["start_index"], d.metadata["end_index"], d.page_content) for d in out)
    assert out[1].metadata["context_before"] and out[0].page_content.endswith(out[1].metadata["context_before"])


# LlamaIndex


def llama_documents():
    from llama_index.core import Document

    return [Document(text=TEXT, metadata={"source": "a"}), Document(text=OTHER, metadata={"source": "b"})]


def check_llama_nodes(nodes, documents):
    from llama_index.core.schema import NodeRelationship

    by_doc = {d.doc_id: d for d in documents}
    for document in documents:
        mine = [n for n in nodes if n.ref_doc_id == document.doc_id]
        assert "".join(n.text for n in mine) == document.text
        for i, node in enumerate(mine):
            assert exact(by_doc[node.ref_doc_id].text, node.start_char_idx, node.end_char_idx, node.text)
            assert node.metadata["source"] == document.metadata["source"]
            assert node.relationships[NodeRelationship.SOURCE].node_id == document.doc_id
            if i:
                assert node.relationships[NodeRelationship.PREVIOUS].node_id == mine[i - 1].node_id
                assert mine[i - 1].relationships[NodeRelationship.NEXT].node_id == node.node_id


def test_llamaindex_ingestion_pipeline_exact_offsets(tiny):
    from llama_index.core.ingestion import IngestionPipeline

    from rr_fast.integrations.llamaindex import RRNodeParser

    documents = llama_documents()
    nodes = IngestionPipeline(transformations=[RRNodeParser(model=tiny, **SMALL)]).run(documents=documents)
    check_llama_nodes(nodes, documents)
    mine = [n for n in nodes if n.ref_doc_id == documents[0].doc_id]
    assert any(TEXT.find(n.text) != n.start_char_idx for n in mine)  # find would have been wrong


def test_llamaindex_parser_pickles_and_runs_in_worker_processes(tiny):
    from llama_index.core.ingestion import IngestionPipeline

    from rr_fast.integrations.llamaindex import RRNodeParser

    parser = RRNodeParser(model=tiny, **SMALL)
    parser.get_nodes_from_documents(llama_documents()[:1])  # load the model first: pickling must not carry it
    assert len(pickle.dumps(parser)) < 10_000
    documents = llama_documents()
    nodes = IngestionPipeline(transformations=[parser], disable_cache=True).run(documents=documents, num_workers=2)
    check_llama_nodes(nodes, documents)


def test_llamaindex_bundled_model():
    from llama_index.core.ingestion import IngestionPipeline

    from rr_fast.integrations.llamaindex import RRNodeParser

    documents = llama_documents()[:1]
    nodes = IngestionPipeline(transformations=[RRNodeParser(**BUNDLED)]).run(documents=documents)
    assert len(nodes) >= 2
    check_llama_nodes(nodes, documents)


# chonkie


def test_chonkie_pipeline_uses_the_registered_rr_chunker(tiny):
    from chonkie.pipeline import ComponentRegistry, Pipeline

    from rr_fast.integrations.chonkie import RRChunker

    assert ComponentRegistry.get_chunker("rr").component_class is RRChunker
    documents = Pipeline().chunk_with("rr", model=tiny, **SMALL).run(texts=[TEXT, OTHER])
    for document, text in zip(documents, (TEXT, OTHER)):
        assert "".join(c.text for c in document.chunks) == text
        for chunk in document.chunks:
            assert exact(text, chunk.start_index, chunk.end_index, chunk.text)
            assert chunk.token_count == chunk.metadata["model_tokens"] and 8 <= chunk.token_count <= 40
    batch = RRChunker(model=tiny, **SMALL).chunk_batch([TEXT, "   ", OTHER])
    assert [[c.text for c in chunks] for chunks in batch] == [
        [c.text for c in documents[0].chunks],
        [],
        [c.text for c in documents[1].chunks],
    ]


def test_chonkie_token_count_is_in_the_length_unit(tiny):
    from rr_fast.integrations.chonkie import RRChunker

    chunks = RRChunker(model=tiny, backend="torch", length_unit="chars", min_tokens=40, max_tokens=120)(TEXT)
    assert all(c.token_count == len(c.text) <= 120 for c in chunks)


def test_chonkie_bundled_model():
    from chonkie.pipeline import Pipeline

    import rr_fast.integrations.chonkie  # noqa: F401  (registers "rr")

    document = Pipeline().chunk_with("rr", **BUNDLED).run(texts=TEXT)
    assert "".join(c.text for c in document.chunks) == TEXT and len(document.chunks) >= 2
    assert all(exact(TEXT, c.start_index, c.end_index, c.text) for c in document.chunks)


# Haystack


def haystack_pipeline(**options):
    from haystack import Pipeline

    from rr_fast.integrations.haystack import RRDocumentSplitter

    pipeline = Pipeline()
    pipeline.add_component("splitter", RRDocumentSplitter(**options))
    return pipeline


def check_haystack(documents, inputs):
    for source in inputs:
        mine = [d for d in documents if d.meta["source_id"] == source.id]
        assert "".join(d.content for d in mine) == source.content
        assert [d.meta["split_id"] for d in mine] == list(range(len(mine)))
        for d in mine:
            start = d.meta["split_idx_start"]
            assert exact(source.content, start, d.meta["split_idx_end"], d.content)
            assert d.meta["page_number"] == source.content.count("\f", 0, start) + 1
            assert d.meta["source"] == source.meta["source"]


def test_haystack_pipeline_and_serialization(tiny):
    from haystack import Document, Pipeline

    inputs = [
        Document(content=TEXT, meta={"source": "a"}),
        Document(content=OTHER + "\f" + OTHER, meta={"source": "b"}),
    ]
    pipeline = haystack_pipeline(model=tiny, **SMALL)
    documents = pipeline.run({"splitter": {"documents": inputs}})["splitter"]["documents"]
    check_haystack(documents, inputs)
    assert any(d.meta["page_number"] == 2 for d in documents)
    again = Pipeline.loads(pipeline.dumps(), allowed_modules=["rr_fast.integrations.haystack"])  # to_dict, from_dict
    assert again.get_component("splitter").options == SMALL
    assert again.run({"splitter": {"documents": inputs}})["splitter"]["documents"] == documents


def test_haystack_bundled_model():
    from haystack import Document

    inputs = [Document(content=TEXT, meta={"source": "a"})]
    documents = haystack_pipeline(**BUNDLED).run({"splitter": {"documents": inputs}})["splitter"]["documents"]
    assert len(documents) >= 2
    check_haystack(documents, inputs)


# Missing extras


@pytest.mark.parametrize(
    ("adapter", "blocked"),
    [
        ("langchain", "langchain_text_splitters"),
        ("llamaindex", "llama_index"),
        ("chonkie", "chonkie"),
        ("haystack", "haystack"),
    ],
)
def test_missing_extra_is_one_clear_import_error(adapter, blocked):
    code = (
        "import sys\n"
        f"sys.modules[{blocked!r}] = None\n"
        "import rr_fast\n"
        "try:\n"
        f"    import rr_fast.integrations.{adapter}\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert f"pip install 'rr-fast[{adapter}]'" in out


def test_importing_rr_fast_imports_no_framework():
    frameworks = ("langchain_core", "llama_index", "chonkie", "haystack")
    code = f"import sys, rr_fast; print([m for m in {frameworks!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_default_model_is_the_bundled_one():
    from rr_fast.integrations.common import LazyChunker

    assert "model" not in LazyChunker().options or LazyChunker().options["model"] == DEFAULT_MODEL


def test_an_adapter_holds_its_model_shares_it_while_alive_and_frees_it_with_itself(tiny, monkeypatch):
    import rr_fast.chunker
    from rr_fast.integrations.chonkie import RRChunker
    from rr_fast.integrations.langchain import RRTextSplitter

    loads = []
    load = rr_fast.chunker._load
    monkeypatch.setattr(rr_fast.chunker, "_load", lambda *args, **kwargs: loads.append(args) or load(*args, **kwargs))
    options = {**SMALL, "target_tokens": 23}  # options no other test holds a Chunker of
    splitter = RRTextSplitter(model=tiny, **options)
    splitter.split_text(TEXT)
    splitter.split_text(OTHER)
    assert len(loads) == 1  # loaded on first use, then held
    other = RRChunker(model=tiny, **options)
    assert [c.text for c in other.chunk(TEXT)] == splitter.split_text(TEXT)
    assert len(loads) == 1  # the same options while the splitter lives: its Chunker
    del splitter, other
    gc.collect()
    RRTextSplitter(model=tiny, **options).split_text(TEXT)
    assert len(loads) == 2  # nobody held the first: loaded again


def test_none_text_has_no_chunks_in_every_adapter(tiny):
    """LangChain and chonkie answer None with no chunks, as LlamaIndex and Haystack do (their content may be None)."""
    from haystack import Document

    from rr_fast.integrations.chonkie import RRChunker
    from rr_fast.integrations.langchain import RRTextSplitter

    splitter = RRTextSplitter(model=tiny, **SMALL)
    assert splitter.split_text(None) == [] and splitter.create_documents([None, "  "]) == []
    chunker = RRChunker(model=tiny, **SMALL)
    assert chunker.chunk(None) == [] and chunker.chunk_batch([None, "  "]) == [[], []]
    empty = [Document(content=None, meta={"source": "a"})]
    assert haystack_pipeline(model=tiny, **SMALL).run({"splitter": {"documents": empty}})["splitter"]["documents"] == []
