"""The model cache folder (``$RR_FAST_CACHE``, default ``~/.cache/rr_fast``): GGUF conversions, staged and checked.

A GGUF model (a bundled one, or a ``.gguf`` file: ``rr_fast.models.names``) is converted once
(``rr_fast.models.conversion``) into a folder of this cache, which later loads read; they never touch the GGUF again.
Below: how an entry is staged, recorded in a manifest, renamed into place and checked on every load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rr_fast.atomic import write_atomically
from rr_fast.errors import RRFastError, first_line
from rr_fast.models.conversion import convert_gguf
from rr_fast.models.hf import silenced


def cache_dir() -> Path:
    """The cache folder: ``$RR_FAST_CACHE``, default ``~/.cache/rr_fast``."""
    return Path(os.environ.get("RR_FAST_CACHE") or Path.home() / ".cache" / "rr_fast")


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
            with silenced(quiet):
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


def write_manifest(folder: Path) -> None:
    """Sizes and sha256 of every file in ``folder``, written atomically: its presence means complete."""
    files = {
        path.name: {"size": path.stat().st_size, "sha256": _sha256(path)}
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != MANIFEST
    }
    write_atomically(folder / MANIFEST, json.dumps({"version": 1, "files": files}, indent=1, sort_keys=True))


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
