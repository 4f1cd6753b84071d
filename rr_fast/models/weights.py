"""What identifies a model's weights, read from its safetensors files without loading them.

A distilled head (``scoring.crossing.CrossingHead``) is fitted on one model's attention: applied to another model, or
to a fine-tune of the same one, it computes meaningless scores without any error. A recipe therefore records, with
each head, the fingerprint of the weights it was fitted on, and the head is refused where the fingerprint differs.

The fingerprint covers every tensor the head's features depend on: the embedding table and every tensor of the
decoder layers it reads. Hashing all of their bytes would cost a read of most of the model on every load (about
400 MB for Gemma 3 270M's 18 layers), so each tensor contributes its name, dtype, shape and SAMPLES evenly spaced
pieces of its stored bytes: a different model differs in shapes or bytes, and a fine-tune changes nearly every
weight, so it changes the sampled bytes too. A change confined to bytes between the samples is not seen.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path

SAMPLES, PIECE = 16, 1024  # pieces per tensor, bytes per piece: 16 KiB of each tensor at most
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def weights_fingerprint(folder: str | Path, layers: int) -> str:
    """The fingerprint (sha256 hex) of the embedding table and the first ``layers`` decoder layers' tensors, as stored
    in ``folder``'s safetensors files. Raises ValueError where the folder has none of them."""
    tensors = stored_tensors(Path(folder))
    chosen = sorted(
        name
        for name in tensors
        if name.endswith("embed_tokens.weight") or ((found := LAYER.search(name)) and int(found.group(1)) < layers)
    )
    if not any(LAYER.search(name) for name in chosen):
        raise ValueError(f"no decoder layer weights in the safetensors files of {folder}")
    digest = hashlib.sha256()
    handles: dict[Path, object] = {}
    try:
        for name in chosen:
            path, dtype, shape, begin, end = tensors[name]
            digest.update(json.dumps([name, dtype, shape]).encode())
            stream = handles.setdefault(path, path.open("rb"))
            size = end - begin
            offsets = [0] if size <= SAMPLES * PIECE else [k * (size - PIECE) // (SAMPLES - 1) for k in range(SAMPLES)]
            for offset in offsets:
                stream.seek(begin + offset)
                digest.update(stream.read(min(PIECE if len(offsets) > 1 else size, size - offset)))
    finally:
        for stream in handles.values():
            stream.close()
    return digest.hexdigest()


def stored_tensors(folder: Path) -> dict[str, tuple[Path, str, list[int], int, int]]:
    """name → (file, dtype, shape, first byte, end byte) of every tensor in the folder's safetensors files."""
    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as stream:
            (length,) = struct.unpack("<Q", stream.read(8))
            header = json.loads(stream.read(length))
        start = 8 + length
        for name, entry in header.items():
            if name != "__metadata__":
                begin, end = entry["data_offsets"]
                tensors[name] = (path, entry["dtype"], entry["shape"], start + begin, start + end)
    return tensors
