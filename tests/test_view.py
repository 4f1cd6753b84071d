"""The HTML view in a real headless Chromium (Debian's package, driven by Playwright), and the PNG plot."""

from __future__ import annotations

import shutil

import pytest

import rr_fast
from rr_fast import Chunker, Limits
from rr_fast.cli import main

# Prose, a long run with no word boundary (so some cuts are forced), markup characters, a CRLF and a NUL (which
# an HTML parser drops from text, shifting every later offset, unless the page writes it otherwise).
TEXT = (
    "The tide came in slowly over the flats. Gulls argued\0 over a crab near the old pier. "
    "A fishing boat rounded the point and cut its engine.\r\n"
    + "x"
    * 300
    + ' Inside the <harbour> office & the radio crackled with the "evening" forecast. '
    "Nobody answered it; the keeper had gone home early that day, as he often did in winter. "
)
LIMITS = Limits(6, 40, 20, 0.02)


@pytest.fixture(scope="module")
def explained(tiny):
    chunker = Chunker(model=tiny, backend="torch", limits=LIMITS)
    chunks, scores = chunker.explain(TEXT)
    return chunks, scores


@pytest.fixture(scope="module")
def page(tiny, tmp_path_factory):
    """The page the CLI writes, opened in Chromium: (page, console errors, requests other than the page)."""
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("view")
    source, target = folder / "in.txt", folder / "view.html"
    source.write_bytes(TEXT.encode("utf-8"))
    argv = ["--model", tiny, "--backend", "torch", "--min-tokens", "6", "--max-tokens", "40", "--target-tokens", "20"]
    assert main([str(source), *argv, "--format", "html", "--output", str(target), "--quiet"]) == 0
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is needed: apt-get install -y chromium (the README's test command does this)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        errors, requests = [], []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("request", lambda request: requests.append(request.url) if request.url != target.as_uri() else None)
        page.goto(target.as_uri())
        page.screenshot(path=str(folder / "view.png"), full_page=True)
        yield page, errors, requests, folder / "view.png"
        browser.close()


def test_page_renders_without_errors_or_network(page):
    _, errors, requests, screenshot = page
    assert errors == [] and requests == []
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_page_text_equals_the_input(page):
    """Character for character, so the page's offsets are the chunks' (a NUL shows as the visible ␀)."""
    view = page[0]
    assert view.eval_on_selector("#text", "node => node.textContent") == TEXT.replace("\0", "\u2400")


def test_each_chunk_on_the_page_spans_its_offsets(page, explained):
    view = page[0]
    chunks, _ = explained
    texts = view.eval_on_selector_all("#text span.chunk", "spans => spans.map(s => s.textContent)")
    assert [len(text) for text in texts] == [chunk.end - chunk.start for chunk in chunks]


def test_one_cut_line_per_cut_and_forced_cuts_marked(page, explained):
    view = page[0]
    chunks, _ = explained
    forced = sum(c.score is None for c in chunks[:-1])
    assert forced >= 1  # the run of x's has no candidate
    assert view.locator("svg line.cut").count() == len(chunks) - 1
    assert view.locator("svg line.cut.forced").count() == forced
    assert view.locator("#text span.chunk").count() == len(chunks)
    assert view.locator("svg rect.limits").count() == 1


def test_chunk_tooltips(page, explained):
    view = page[0]
    chunks, _ = explained
    titles = view.eval_on_selector_all("#text span.chunk", "spans => spans.map(s => s.title)")
    for chunk, title in zip(chunks, titles):
        assert title.startswith(f"chunk {chunk.index} · chars {chunk.start}–{chunk.end} · {chunk.token_count} model")
        assert ("cut score" in title) and (chunk.score is None or f"{chunk.score:.3f}" in title)


def test_candidates_are_drawn(page, explained):
    view = page[0]
    _, scores = explained
    assert view.locator("svg circle.candidate").count() == int((scores.utility == scores.utility).sum())


def test_plot_writes_a_png(explained, tmp_path):
    chunks, scores = explained
    path = tmp_path / "cuts.png"
    rr_fast.plot(TEXT, scores, chunks, str(path), limits=LIMITS, penalty=0.5)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
