"""A picture of the cuts: why each cut fell where it did.

``render_html`` writes one self-contained page (inline SVG and CSS, no script, no network): the utility curve
over the text with every candidate, the chosen cuts, forced cuts (plain token edges taken because no candidate
fit the limits) dashed in red, the cut penalty ρ, and a strip of chunk lengths against the min/max band; below
it the text itself, one background per chunk, each with a tooltip. ``plot`` draws the same curve with
matplotlib (the ``[plot]`` extra). Both take the text, the ``Scores`` and the chunks of ``Chunker.explain``.
``draw_curve`` draws the curve onto a given matplotlib ``Axes``, for figures of one's own.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rr_fast.results import Chunk, Scores
from rr_fast.segmentation.dp import Limits

# One background per chunk, cycling; light enough to read black text on.
PALETTE = ("#dbeafe", "#fde68a", "#d1fae5", "#fbcfe8", "#e0e7ff", "#fed7aa")
# Characters an HTML parser would not keep one for one in text, so every later offset on the page would shift:
# a raw CR is read as a newline (CRLF as one), a NUL is dropped (as the reference &#0;, it turns into U+FFFD).
# Each becomes one character the page shows as it is: CR by reference, NUL as the visible symbol ␀.
PAGE_SAFE = str.maketrans({"\r": "&#13;", "\0": "\u2400"})
WIDTH, CURVE_TOP, CURVE_HEIGHT, STRIP_TOP, STRIP_HEIGHT, LEFT, RIGHT = 1000, 16, 170, 212, 72, 44, 12


@dataclass(frozen=True)
class Cut:
    char: int
    score: float | None
    forced: bool  # not a scored candidate: a plain token edge the limits forced


def cuts_of(chunks: Sequence[Chunk]) -> list[Cut]:
    """Internal cuts; a cut without a score was not among the scored candidates, so the limits forced it."""
    return [Cut(c.end, c.score, c.score is None) for c in chunks[:-1]]


def curve_values(scores: Scores) -> np.ndarray:
    """What the DP weighs per candidate: the calibrated utility, else the first readout."""
    values = scores.utility if scores.utility is not None else next(iter(scores.readouts.values()))
    return np.asarray(values, dtype=np.float64)


def render_html(
    text: str,
    scores: Scores,
    chunks: Sequence[Chunk],
    limits: Limits | None = None,
    penalty: float | None = None,
    unit: str = "model tokens",
    title: str = "rr-fast cuts",
) -> str:
    """One self-contained HTML page showing the cuts of ``text``."""
    x = _x_scale(len(text))
    values = curve_values(scores)
    finite = np.isfinite(values)
    low, high = (0.0, 1.0) if scores.utility is not None or not finite.any() else _range(values[finite])
    y = _y_scale(low, high)
    parts = [_chunk_bands(chunks, x), _axes(low, high, y)]
    if penalty is not None and low <= penalty <= high:
        parts.append(
            f'<line class="penalty" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(penalty):.1f}" y2="{y(penalty):.1f}"/>'
            f'<text class="label" x="{WIDTH - RIGHT - 4}" y="{y(penalty) - 4:.1f}" text-anchor="end">'
            f"ρ = {penalty:.2f}</text>"
        )
    points = " ".join(f"{x(c):.1f},{y(v):.1f}" for c, v in zip(scores.chars[finite], values[finite]))
    parts.append(f'<polyline class="curve" points="{points}"/>')
    for char, value in zip(scores.chars[finite].tolist(), values[finite].tolist()):
        parts.append(
            f'<circle class="candidate" cx="{x(char):.1f}" cy="{y(value):.1f}" r="2.2">'
            f"<title>candidate at char {char}: {value:.3f}</title></circle>"
        )
    for cut in cuts_of(chunks):
        label = "forced cut (no candidate within the limits)" if cut.forced else f"cut, score {cut.score:.3f}"
        parts.append(
            f'<line class="cut{" forced" if cut.forced else ""}" x1="{x(cut.char):.1f}" x2="{x(cut.char):.1f}" '
            f'y1="{CURVE_TOP}" y2="{STRIP_TOP + STRIP_HEIGHT}"><title>{label} at char {cut.char}</title></line>'
        )
    parts.append(_length_strip(chunks, limits, x, unit))
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {STRIP_TOP + STRIP_HEIGHT + 22}" '
        f'role="img" aria-label="cut scores">{"".join(parts)}</svg>'
    )
    return _PAGE.format(
        title=html.escape(title),
        summary=html.escape(_summary(text, scores, chunks, limits, unit)),
        legend=_LEGEND,
        svg=svg,
        text="".join(_chunk_span(text, chunk, unit) for chunk in chunks),
    )


def plot(
    text: str,
    scores: Scores,
    chunks: Sequence[Chunk],
    path: str,
    limits: Limits | None = None,
    penalty: float | None = None,
    unit: str = "model tokens",
) -> None:
    """Save the score curve with candidates, cuts, forced cuts and the length band as a PNG (matplotlib)."""
    plt = _pyplot()
    figure, (curve, strip) = plt.subplots(
        2, 1, figsize=(10, 3.6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}, constrained_layout=True
    )
    cuts = cuts_of(chunks)
    draw_curve(curve, scores, cuts, len(text), penalty)
    _draw_lengths(strip, chunks, limits, unit)
    draw_cut_lines(strip, cuts)
    if penalty is not None:
        curve.legend(loc="upper right", fontsize=8)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_curve(axes, scores: Scores, cuts: Sequence[Cut], length: int, penalty: float | None = None) -> None:
    """The score curve of one text on a matplotlib ``Axes``: one pale band per chunk, the utility (else the
    first readout) at every candidate, the cut penalty ρ, and the cuts (forced ones dashed red).

    ``plot`` and the quality benchmark's figure both draw with it; a caller may add to the Axes (the
    benchmark marks the true record boundaries).
    """
    edges = [0, *(cut.char for cut in cuts), length]
    for i, (start, end) in enumerate(zip(edges, edges[1:])):
        axes.axvspan(start, end, color=PALETTE[i % len(PALETTE)], lw=0)
    values = curve_values(scores) if len(scores.chars) else np.zeros(0)
    finite = np.isfinite(values)
    axes.plot(scores.chars[finite], values[finite], color="#1f2937", lw=1)
    axes.scatter(scores.chars[finite], values[finite], s=6, color="#1f2937", zorder=3)
    if penalty is not None:
        axes.axhline(penalty, color="#6b7280", ls=":", lw=1, label=f"ρ = {penalty:.2f}")
    draw_cut_lines(axes, cuts)
    axes.set_ylabel("utility" if scores.utility is not None else "readout")
    axes.set_xlim(0, max(length, 1))


def draw_cut_lines(axes, cuts: Sequence[Cut]) -> None:
    """Every cut as a vertical line: chosen cuts solid blue, forced cuts dashed red (as in the HTML view)."""
    for cut in cuts:
        style = {"color": "#dc2626", "ls": "--"} if cut.forced else {"color": "#2563eb", "ls": "-"}
        axes.axvline(cut.char, lw=1.2, **style)


def _draw_lengths(axes, chunks: Sequence[Chunk], limits: Limits | None, unit: str) -> None:
    lengths = [c.length if c.length is not None else c.token_count for c in chunks]
    axes.bar([c.start for c in chunks], lengths, width=[c.end - c.start for c in chunks], align="edge", color="#9ca3af")
    if limits is not None:
        axes.axhspan(limits.min_tokens, limits.max_tokens, color="#86efac", alpha=0.4, lw=0)
        axes.axhline(limits.target_tokens, color="#15803d", ls=":", lw=1)
    axes.set_ylabel(unit.split()[-1] if unit else "length")
    axes.set_xlabel("character offset")


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("rr_fast.plot needs matplotlib: pip install 'rr-fast[plot]'") from None
    return plt


def _x_scale(length: int):
    span = max(length, 1)
    return lambda char: LEFT + (WIDTH - LEFT - RIGHT) * float(char) / span


def _y_scale(low: float, high: float):
    return lambda value: CURVE_TOP + CURVE_HEIGHT * (1.0 - (float(value) - low) / (high - low))


def _range(values: np.ndarray) -> tuple[float, float]:
    low, high = float(values.min()), float(values.max())
    return (low, high) if high > low else (low - 0.5, high + 0.5)


def _chunk_bands(chunks: Sequence[Chunk], x) -> str:
    return "".join(
        f'<rect class="band" x="{x(c.start):.1f}" y="{CURVE_TOP}" width="{max(x(c.end) - x(c.start), 0.5):.1f}" '
        f'height="{CURVE_HEIGHT}" fill="{PALETTE[c.index % len(PALETTE)]}"><title>chunk {c.index}</title></rect>'
        for c in chunks
    )


def _axes(low: float, high: float, y) -> str:
    ticks = []
    for value in np.linspace(low, high, 3):
        ticks.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}"/>'
            f'<text class="label" x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.2g}</text>'
        )
    return "".join(ticks)


def _length_strip(chunks: Sequence[Chunk], limits: Limits | None, x, unit: str) -> str:
    lengths = [c.length if c.length is not None else c.token_count for c in chunks]
    top = max([*lengths, limits.max_tokens if limits else 0, 1]) * 1.1

    def y(value: float) -> float:
        return STRIP_TOP + STRIP_HEIGHT * (1.0 - value / top)

    parts = []
    if limits is not None:
        band_top, band_bottom = y(limits.max_tokens), y(limits.min_tokens)
        parts.append(
            f'<rect class="limits" x="{LEFT}" y="{band_top:.1f}" width="{WIDTH - LEFT - RIGHT}" '
            f'height="{band_bottom - band_top:.1f}"><title>allowed lengths: {limits.min_tokens}–{limits.max_tokens} '
            f"{html.escape(unit)}</title></rect>"
            f'<line class="target" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(limits.target_tokens):.1f}" '
            f'y2="{y(limits.target_tokens):.1f}"/>'
            f'<text class="label" x="{LEFT - 6}" y="{band_top + 4:.1f}" text-anchor="end">{limits.max_tokens}</text>'
            f'<text class="label" x="{LEFT - 6}" y="{band_bottom + 4:.1f}" text-anchor="end">{limits.min_tokens}</text>'
        )
    for chunk, length in zip(chunks, lengths):
        over = limits is not None and not limits.min_tokens <= length <= limits.max_tokens
        width, height = max(x(chunk.end) - x(chunk.start) - 1, 0.5), STRIP_TOP + STRIP_HEIGHT - y(length)
        parts.append(
            f'<rect class="length{" outside" if over else ""}" x="{x(chunk.start) + 0.5:.1f}" y="{y(length):.1f}" '
            f'width="{width:.1f}" height="{height:.1f}">'
            f"<title>chunk {chunk.index}: {length} {html.escape(unit)}</title></rect>"
            f'<line class="level" x1="{x(chunk.start) + 0.5:.1f}" x2="{x(chunk.start) + 0.5 + width:.1f}" '
            f'y1="{y(length):.1f}" y2="{y(length):.1f}"/>'
        )
    parts.append(
        f'<text class="label" x="{LEFT}" y="{STRIP_TOP + STRIP_HEIGHT + 16}">chunk lengths ({html.escape(unit)})'
        f"{' against the min–max band' if limits else ''}</text>"
    )
    return "".join(parts)


def _chunk_span(text: str, chunk: Chunk, unit: str) -> str:
    score = "end of text" if chunk.score is None and chunk.end == len(text) else None
    if score is None:
        score = "forced (no candidate within the limits)" if chunk.score is None else f"{chunk.score:.3f}"
    length = chunk.length if chunk.length is not None else chunk.token_count
    tip = (
        f"chunk {chunk.index} · chars {chunk.start}–{chunk.end} · {chunk.token_count} model tokens"
        f"{'' if unit == 'model tokens' else f' · {length} {unit}'} · cut score {score}"
    )
    body = html.escape(chunk.text, quote=False).translate(PAGE_SAFE)
    return (
        f'<span class="chunk" data-index="{chunk.index}" title="{html.escape(tip)}" '
        f'style="background:{PALETTE[chunk.index % len(PALETTE)]}">{body}</span>'
    )


def _summary(text: str, scores: Scores, chunks: Sequence[Chunk], limits: Limits | None, unit: str) -> str:
    forced = sum(cut.forced for cut in cuts_of(chunks))
    rule = (
        f" · lengths {limits.min_tokens}–{limits.max_tokens} {unit} (target {limits.target_tokens})" if limits else ""
    )
    return (
        f"{len(text):,} characters · {scores.num_tokens:,} model tokens · {len(scores.chars):,} candidates · "
        f"{len(chunks)} chunks · {forced} forced cuts{rule}"
    )


_LEGEND = (
    '<span><i class="key curve"></i>utility per candidate</span>'
    '<span><i class="key cut"></i>cut</span>'
    '<span><i class="key forced"></i>forced cut</span>'
    '<span><i class="key penalty"></i>penalty ρ</span>'
    '<span><i class="key limits"></i>min–max length</span>'
)

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1080px;
  padding: 0 16px; color: #111827; background: #fff; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }}
.summary {{ color: #4b5563; margin: 0 0 10px; }}
.legend {{ display: flex; gap: 18px; flex-wrap: wrap; color: #374151; font-size: 12px; margin-bottom: 6px; }}
.key {{ display: inline-block; width: 18px; height: 0; margin-right: 6px; vertical-align: middle; }}
.key.curve {{ border-top: 2px solid #1f2937; }} .key.cut {{ border-top: 2px solid #2563eb; }}
.key.forced {{ border-top: 2px dashed #dc2626; }} .key.penalty {{ border-top: 2px dotted #6b7280; }}
.key.limits {{ height: 10px; background: #bbf7d0; }}
svg {{ width: 100%; height: auto; display: block; }}
svg .curve {{ fill: none; stroke: #1f2937; stroke-width: 1.2; stroke-linejoin: round; }}
svg .candidate {{ fill: #1f2937; }}
svg .cut {{ stroke: #2563eb; stroke-width: 1.6; }}
svg .cut.forced {{ stroke: #dc2626; stroke-dasharray: 5 3; }}
svg .penalty {{ stroke: #6b7280; stroke-dasharray: 2 3; }}
svg .grid {{ stroke: #e5e7eb; }}
svg .band {{ opacity: 0.75; }}
svg .limits {{ fill: #bbf7d0; opacity: 0.9; }}
svg .target {{ stroke: #15803d; stroke-dasharray: 2 3; }}
svg .length {{ fill: #334155; fill-opacity: 0.07; }} svg .level {{ stroke: #334155; stroke-width: 2.5; }}
svg .length.outside {{ fill: #dc2626; }}
svg .label {{ font-size: 11px; fill: #4b5563; }}
#text {{ white-space: pre-wrap; word-wrap: break-word; font: 13px/1.6 ui-monospace, "SFMono-Regular", Menlo,
  Consolas, monospace; border: 1px solid #e5e7eb; border-radius: 6px; padding: 12px; margin-top: 14px; }}
#text .chunk {{ border-radius: 3px; box-shadow: inset -2px 0 0 #2563eb; }}
#text .chunk:hover {{ outline: 2px solid #2563eb; }}
</style></head>
<body>
<h1>{title}</h1>
<p class="summary">{summary}</p>
<div class="legend">{legend}</div>
{svg}
<div id="text">{text}</div>
</body></html>
"""
