"""Text: a string → model tokens with character offsets → the edges a cut may fall on → a prepared ``Document``.

- ``tokenizer``: the model's tokenizer (its tokenizer.json run directly, or transformers');
- ``tokens``: text → tokens with character offsets, in pieces for long texts;
- ``edges``: clean edges (cuts that keep every character whole) and the paper's candidates among them;
- ``structure``: the writer's boundaries (headings, paragraphs, lists, lines) and the fallback tiers;
- ``documents``: a text prepared for scoring (``Document``, ``Preparer``).
"""
