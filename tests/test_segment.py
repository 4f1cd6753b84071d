"""The DP must return the exact optimum: checked against brute force over every subset of candidates, with the
kernels interpreted and compiled (``rr_fast.kernels`` interprets a small problem while Numba is not loaded)."""

import subprocess
import sys
from itertools import combinations, product
from pathlib import Path

import numpy as np
import pytest

from rr_fast import kernels
from rr_fast.kernels import dp
from rr_fast.segmentation.calibration import percentiles
from rr_fast.segmentation.dp import Limits, chunk_length_column, segment

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, params=["interpreted", "compiled"])
def kernel(request, monkeypatch):
    """Every test of this file runs with the kernels interpreted, then compiled."""
    if request.param == "interpreted":
        monkeypatch.setattr(kernels, "INTERPRETED_STEPS", 10**18)
        monkeypatch.setattr(kernels, "compiled_loaded", lambda: False)  # as in a process that never loaded Numba
    else:
        monkeypatch.setattr(kernels, "INTERPRETED_STEPS", 0)
    return request.param


def objective(cuts, n, utility_of, limits, penalty):
    bounds = [0, *cuts, n]
    lengths = np.diff(bounds)
    if (lengths < limits.min_tokens).any() or (lengths > limits.max_tokens).any():
        return None
    spread = ((lengths - limits.target_tokens) / limits.target_tokens) ** 2
    return sum(utility_of[c] - penalty for c in cuts) - limits.length_weight * spread.sum()


def brute_force(n, edges, utilities, limits, penalty, num_chunks=None):
    utility_of = dict(zip(edges.tolist(), utilities.tolist()))
    best, best_cuts = None, None
    sizes = range(len(edges) + 1) if num_chunks is None else [num_chunks - 1]
    for size in sizes:
        for cuts in combinations(edges.tolist(), size):
            value = objective(cuts, n, utility_of, limits, penalty)
            if value is not None and (best is None or value > best + 1e-12):
                best, best_cuts = value, list(cuts)
    return best, best_cuts


@pytest.mark.parametrize("seed", range(60))
def test_open_count_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(10, 60))
    edges = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(1, 12))), replace=False))
    utilities = rng.random(len(edges))
    limits = Limits(int(rng.integers(1, 8)), int(rng.integers(8, 30)), int(rng.integers(5, 20)), float(rng.random()))
    penalty = float(rng.random())
    best, cuts = brute_force(n, edges, utilities, limits, penalty)
    if best is None:
        return  # infeasible instances are covered by the fallback tests
    got = segment(n, edges, utilities, limits, penalty=penalty)
    assert not got.warnings
    assert objective(
        got.cuts.tolist(), n, dict(zip(edges.tolist(), utilities.tolist())), limits, penalty
    ) == pytest.approx(best)
    assert got.cuts.tolist() == cuts


@pytest.mark.parametrize("seed", range(40))
def test_by_chunk_length_matches_brute_force(seed):
    """Utilities [edges, lengths]: a cut's utility is the one for the length of the chunk it starts (column k for a
    chunk of CHUNK_STEP · (k + 1) tokens or more, the last for any longer), and the DP finds the best such set, with
    the count open and with it given."""
    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(20, 90))
    edges = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(1, 11))), replace=False))
    utilities = rng.random((len(edges), int(rng.integers(2, 6))))
    limits = Limits(int(rng.integers(1, 10)), int(rng.integers(20, 60)), int(rng.integers(8, 30)), float(rng.random()))
    penalty = float(rng.random())

    def value(cuts):
        bounds = [0, *cuts, n]
        gains = {c: utilities[list(edges).index(c), chunk_length_column(end - c, utilities.shape[1])]
                 for c, end in zip(cuts, bounds[2:])}  # fmt: skip
        return objective(cuts, n, gains, limits, penalty)

    found = [(v, list(c)) for size in range(len(edges) + 1) for c in combinations(edges.tolist(), size)
             if (v := value(c)) is not None]  # fmt: skip
    if not found:
        return
    best = max(v for v, _ in found)
    got = segment(n, edges, utilities, limits, penalty=penalty)
    assert value(got.cuts.tolist()) == pytest.approx(best)
    if sum(v > best - 1e-12 for v, _ in found) == 1:
        assert got.cuts.tolist() == next(c for v, c in found if v == best)

    def given_value(cuts):  # the fixed count's objective: no penalty per cut
        bounds = [0, *cuts, n]
        gains = {c: utilities[list(edges).index(c), chunk_length_column(end - c, utilities.shape[1])]
                 for c, end in zip(cuts, bounds[2:])}  # fmt: skip
        return objective(cuts, n, gains, limits, 0.0)

    for k in (2, 3):  # the count given: the best set of k - 1 cuts, each charged for the chunk it starts
        found = [(v, list(c)) for c in combinations(edges.tolist(), k - 1) if (v := given_value(c)) is not None]
        if found:
            best = max(v for v, _ in found)
            got = segment(n, edges, utilities, limits, penalty=penalty, num_chunks=k).cuts.tolist()
            assert len(got) == k - 1 and given_value(got) == pytest.approx(best)
            if sum(v > best - 1e-12 for v, _ in found) == 1:
                assert got == next(c for v, c in found if v == best)


def test_a_cut_is_charged_the_utility_of_the_chunk_it_starts():
    """One edge whose utility is high only for chunks of 16 tokens or more: it is cut where the chunk after it is that
    long, not where it would be 8."""
    limits = Limits(1, 100, 10, 0.0)
    utilities = np.array([[0.0, 1.0]])  # a chunk of 8-15 tokens: 0; of 16 or more: 1
    assert segment(30, np.array([10]), utilities, limits, penalty=0.5).cuts.tolist() == [10]  # the chunk after: 20
    assert segment(30, np.array([20]), utilities, limits, penalty=0.5).cuts.tolist() == []  # the chunk after: 10


@pytest.mark.parametrize("seed", range(40))
def test_fixed_count_matches_brute_force(seed):
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(10, 50))
    edges = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(2, 11))), replace=False))
    utilities = rng.random(len(edges))
    limits = Limits(int(rng.integers(1, 6)), int(rng.integers(6, 40)), int(rng.integers(5, 20)), float(rng.random()))
    k = int(rng.integers(1, 5))
    best, cuts = brute_force(n, edges, utilities, limits, 0.0, num_chunks=k)
    if best is None:  # then a gap between consecutive edges longer than max_tokens may be a chunk of its own
        nodes, gain_of = [0, *edges.tolist(), n], dict(zip(edges.tolist(), utilities.tolist()))
        found = [
            (value, list(c))
            for c in combinations(edges.tolist(), k - 1)
            if (value := objective_with_stretches(c, n, gain_of, nodes, limits, limits.min_tokens)) is not None
        ]
        if not found:
            with pytest.raises(ValueError):
                segment(n, edges, utilities, limits, penalty=0.0, num_chunks=k)
            return
        best, cuts = max(found, key=lambda item: item[0])  # ties: the first found, as the kernel's earliest
    got = segment(n, edges, utilities, limits, penalty=0.0, num_chunks=k)
    assert len(got.cuts) == k - 1
    assert got.cuts.tolist() == cuts


def test_percentiles_average_ties():
    assert percentiles(np.array([0.3, 0.1, 0.3, 0.9])).tolist() == [0.625, 0.25, 0.625, 1.0]


def test_short_text_is_one_chunk_with_warning():
    got = segment(10, np.array([5]), np.array([1.0]), Limits(48, 384, 192, 0.02), penalty=0.0)
    assert got.cuts.size == 0 and "fewer than min_tokens" in got.warnings[0]


def test_fallback_edges_keep_max_length():
    # candidates only near the start: without fallback edges no split can respect max_tokens
    got = segment(
        100, np.array([5]), np.array([1.0]), Limits(4, 30, 20, 0.02), penalty=0.5, fallback_edges=np.arange(1, 100)
    )
    lengths = np.diff([0, *got.cuts.tolist(), 100])
    assert lengths.max() <= 30 and lengths.min() >= 4
    assert "plain token boundaries" in got.warnings[0]


def test_a_gap_longer_than_max_tokens_is_a_chunk_of_its_own():
    """The only possible cut leaves two stretches longer than max_tokens: each is one chunk, nothing is relaxed."""
    got = segment(100, np.array([50]), np.array([1.0]), Limits(4, 30, 20, 0.02), penalty=0.5)
    assert got.cuts.tolist() == [50] and not got.warnings


def random_problem(rng, n):
    """Nodes of an n-token text as the DP sees them: a step-8 grid and random sentence ends, with random gains."""
    inner = np.concatenate([np.arange(8, n, 8), rng.integers(1, n, n // 30)])
    positions = np.unique(np.concatenate([[0], inner, [n]])).astype(np.int64)
    return positions, rng.normal(size=len(positions))


@pytest.mark.parametrize("seed", range(4))
def test_interpreted_and_compiled_kernels_agree_exactly(seed, kernel):
    if kernel == "compiled":
        return  # one comparison is enough; the fixture's second run adds nothing
    rng = np.random.default_rng(seed)
    positions, gains = random_problem(rng, int(rng.integers(2_000, 6_000)))
    gains[0] = 0.0  # the start node's gain (the kernels' contract)
    compiled = kernels._compiled()
    # the last: every grid gap is longer than max_len, so stretches make every chunk
    for args in ((16, 384, 192.0, 0.02, False), (48, 256, 128.0, 1.0, True), (1, 6, 4.0, 0.02, True)):
        interpreted_result, compiled_result = (
            dp.open_count(positions, gains[:, None], *args, positions, 1),
            compiled.open_count(positions, gains[:, None], *args, positions, 1),
        )
        assert interpreted_result[0] == compiled_result[0]  # the same float, not an approximation
        assert interpreted_result[1].tolist() == compiled_result[1].tolist()
    k = len(positions) // 40
    by_length = np.c_[gains, 0.5 * gains, gains[::-1]]  # gains by the length of the chunk a cut starts
    by_length[0] = 0.0
    for stretches, (node_gains, step) in product((False, True), ((gains[:, None], 1), (by_length, 8))):
        args = (k, 16, 384, 192.0, 0.02, stretches, positions, step)
        interpreted_result = dp.fixed_count(positions, node_gains, *args)
        compiled_result = compiled.fixed_count(positions, node_gains, *args)
        assert np.isfinite(compiled_result[0]) and interpreted_result[0] == compiled_result[0]
        assert interpreted_result[1].tolist() == compiled_result[1].tolist()


def test_the_process_interprets_until_its_steps_would_pay_for_loading_numba(monkeypatch):
    monkeypatch.setattr(kernels, "INTERPRETED_STEPS", 1_000)
    monkeypatch.setattr(kernels, "_interpreted_steps", 0)
    monkeypatch.setattr(kernels, "compiled_loaded", lambda: False)
    assert kernels._kernel("fixed_count", 1_000) is kernels._compiled().fixed_count  # one problem worth the load
    assert kernels._kernel("open_count", 400) is dp.open_count
    assert kernels._kernel("open_count", 599) is dp.open_count  # 999 steps interpreted so far
    assert kernels._kernel("open_count", 1) is kernels._compiled().open_count  # the next would make 1,000
    monkeypatch.setattr(kernels, "_interpreted_steps", 0)
    monkeypatch.setattr(kernels, "compiled_loaded", lambda: True)
    assert kernels._kernel("open_count", 1) is kernels._compiled().open_count  # loaded: compiled costs nothing


def test_a_small_problem_never_loads_numba_and_many_small_ones_do(kernel):
    if kernel == "compiled":
        return  # a fresh process each: the fixture's second run adds nothing
    program = (
        "import sys; import numpy as np; from rr_fast import kernels\n"
        "positions = np.arange(0, 501, 8, dtype=np.int64); gains = np.ones(len(positions))\n"
        "small = kernels.open_count(positions, gains, 16, 384, 192.0, 0.02)\n"
        "print(kernels.compiled_loaded(), 'numba' in sys.modules)\n"
        "calls = 1\n"
        "while not kernels.compiled_loaded():\n"
        "    later = kernels.open_count(positions, gains, 16, 384, 192.0, 0.02); calls += 1\n"
        "print(calls * kernels._steps(positions, 384) >= kernels.INTERPRETED_STEPS,"
        " later[0] == small[0], later[1].tolist() == small[1].tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.stdout.split("\n")[:2] == ["False False", "True True True"], done.stderr


def test_load_compiled_loads_numba_at_once():
    program = "from rr_fast import kernels; kernels.load_compiled(); print(kernels.compiled_loaded())"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.stdout.strip() == "True", done.stderr


def test_the_step_bound_counts_predecessors_within_max_len():
    positions = np.array([0, 3, 5, 9, 10], dtype=np.int64)
    # predecessors within 5 tokens before each node: none, 0, 0 and 3, 5, 5 and 9
    assert kernels._steps(positions, 5) == 0 + 1 + 2 + 1 + 2


def objective_with_stretches(cuts, n, gain_of, nodes, limits, min_len):
    """The open-count objective where a chunk between two consecutive nodes may exceed max_tokens (a stretch)."""
    bounds = [0, *cuts, n]
    for a, b in zip(bounds, bounds[1:]):
        stretch = b - a > limits.max_tokens and nodes.index(b) == nodes.index(a) + 1
        if b - a < min_len or (b - a > limits.max_tokens and not stretch):
            return None
    lengths = np.diff(bounds)
    spread = ((lengths - limits.target_tokens) / limits.target_tokens) ** 2
    return sum(gain_of[c] for c in cuts) - limits.length_weight * spread.sum()


@pytest.mark.parametrize("seed", range(60))
def test_a_stretch_longer_than_max_is_one_chunk_and_every_other_chunk_keeps_the_limits(seed):
    """Texts whose possible cuts leave gaps longer than max_tokens: only those gaps may be longer chunks, each alone,
    and the cuts are the exact optimum of the relaxations in order (brute force over every subset)."""
    rng = np.random.default_rng(2000 + seed)
    limits = Limits(int(rng.integers(1, 5)), int(rng.integers(5, 12)), int(rng.integers(4, 10)), float(rng.random()))
    gaps = rng.integers(1, limits.max_tokens + 1, int(rng.integers(2, 10)))
    gaps[rng.integers(0, len(gaps), 2)] = rng.integers(limits.max_tokens + 1, 3 * limits.max_tokens, 2)  # stretches
    clean = np.cumsum(gaps)[:-1]
    n = int(gaps.sum())
    edges = np.sort(rng.choice(clean, size=int(rng.integers(0, len(clean) + 1)), replace=False))
    utilities, penalty = rng.random(len(edges)), float(rng.random())
    got = segment(n, edges, utilities, limits, penalty=penalty, fallback_edges=clean)
    nodes = [0, *clean.tolist(), n]
    gain_of = {int(e): -penalty for e in clean} | {int(e): u - penalty for e, u in zip(edges, utilities)}
    best = None
    for min_len in (limits.min_tokens, 1):  # the min_tokens relaxation comes last
        for size in range(len(clean) + 1):
            for cuts in combinations(clean.tolist(), size):
                value = objective_with_stretches(cuts, n, gain_of, nodes, limits, min_len)
                if value is not None and (best is None or value > best[0] + 1e-12):
                    best = (value, list(cuts))
        if best is not None:
            break
    assert got.cuts.tolist() == best[1]
    bounds = [0, *got.cuts.tolist(), n]
    for a, b in zip(bounds, bounds[1:]):
        assert b - a <= limits.max_tokens or nodes.index(b) == nodes.index(a) + 1  # longer only as a stretch alone


@pytest.mark.parametrize("seed", range(20))
def test_a_fixed_count_holds_a_stretch_alone_too(seed):
    rng = np.random.default_rng(3000 + seed)
    limits = Limits(1, 6, 4, 0.1)
    gaps = np.array([2, 3, 15, 2, 4, 2, 20, 3])[: int(rng.integers(4, 9))]
    clean = np.cumsum(gaps)[:-1]
    n, utilities = int(gaps.sum()), rng.random(len(clean))
    nodes, gain_of = [0, *clean.tolist(), n], dict(zip(clean.tolist(), utilities.tolist()))
    for k in range(1, len(gaps) + 1):
        found = [
            (value, list(c))
            for c in combinations(clean.tolist(), k - 1)
            if (value := objective_with_stretches(c, n, gain_of, nodes, limits, limits.min_tokens)) is not None
        ]
        if not found:
            with pytest.raises(ValueError):
                segment(n, clean, utilities, limits, penalty=0.0, num_chunks=k)
            continue
        got = segment(n, clean, utilities, limits, penalty=0.0, num_chunks=k)
        assert got.cuts.tolist() == max(found, key=lambda item: item[0])[1]
