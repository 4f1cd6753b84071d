"""Models: what rr-fast knows about each model, and where its weights come from.

- ``recipes``: each model's recipe (defaults, calibrated ρ, presets, distilled heads); the bundled ones in
  ``models/bundled/``;
- ``cache``: model names → folders (bundled GGUFs converted once into the cache, local folders, hub ids), each model's
  BOS convention;
- ``weights``: the fingerprint that ties a distilled head to the weights it was fitted on;
- ``hf``: quiet transformers loading, and the config keys mlx-lm needs.
"""
