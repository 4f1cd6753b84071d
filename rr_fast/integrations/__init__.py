"""Drop-in chunkers for RAG frameworks, each behind its own optional extra.

Import the one you need; nothing here imports a framework until you do:

- ``rr_fast.integrations.langchain``: ``RRTextSplitter`` (``pip install 'rr-fast[langchain]'``)
- ``rr_fast.integrations.llamaindex``: ``RRNodeParser`` (``pip install 'rr-fast[llamaindex]'``)
- ``rr_fast.integrations.chonkie``: ``RRChunker``, registered as chonkie's ``"rr"`` (``pip install 'rr-fast[chonkie]'``)
- ``rr_fast.integrations.haystack``: ``RRDocumentSplitter`` (``pip install 'rr-fast[haystack]'``)

Every adapter takes ``model`` and ``rr_fast.Chunker``'s options, with the length limits flat
(``min_tokens``, ``max_tokens``, ``target_tokens``) so that they serialize as plain values. How the model reads
boundaries, the length weight λ included, is its recipe's, as for ``Chunker``: an adapter picks it with ``preset``
or ``recipe`` and refuses it as an option of its own.
"""
