"""The exact segmentation dynamic programs, in the subset of Python that Numba compiles (``rr_fast.kernels``
runs them compiled, or interpreted where a problem is too small to repay loading Numba).

Both programs run over *candidate nodes*, not token positions: node 0 is the start of the text, nodes
1..m are the eligible edges (token positions, strictly increasing) and node m+1 is the end. Because the
nodes are sorted, the predecessors allowed by the hard limits ``Lmin <= p[j] - p[i] <= Lmax`` form one
contiguous range, found with two monotone pointers. That makes the open-count program O(m * w), where w is
the number of candidates inside one Lmax span, and the fixed-count program O(K * m * w).

In both programs a cut's gain may depend on the length of the chunk it starts (a reading of the text right of the cut
over that chunk's own tokens, ``segmentation.calibration``): it is counted when the program picks the chunk's end, so
each transition still looks at one predecessor and the programs keep their cost.

``stretches``: a gap between two consecutive nodes that is longer than ``Lmax`` (a grapheme of many code points, a
run of tokens with no clean cut) cannot be split, so with ``stretches`` such a gap may be one chunk on its own, and
only that chunk exceeds ``Lmax``: every other chunk keeps the limit, and the program stays exact around it.

Ties are broken towards the earliest predecessor, so results are deterministic.
"""

from __future__ import annotations

import numpy as np

NEG_INF = -np.inf


def open_count(positions, gains, min_len, max_len, target, lam, stretches, tokens, step):
    """Best segmentation with a free number of chunks.

    positions: int64[m + 2], node 0 = 0, node m + 1 = n, strictly increasing.
    gains: float64[m + 2, G], reward for cutting at each node (already net of the cut penalty), by the length of the
        chunk the cut starts: column k for a chunk of ``step`` · (k + 1) model tokens or more (the last: any longer),
        column 0 for a shorter one; with one column, a gain per node. The start node's gains must be 0.
    stretches: a gap longer than max_len between consecutive nodes may be a chunk of its own.
    tokens: int64[m + 2], each node's model-token position (the chunk lengths the gains' columns are read by; the
        limits apply to ``positions``, which may count another unit).
    Returns (score, chosen node indices including both ends); score is -inf when infeasible.
    """
    count = positions.shape[0]
    columns = gains.shape[1]
    flat = gains[:, 0]  # one gain per node (read directly: a problem small enough is interpreted, step by step)
    best = np.full(count, NEG_INF)  # best[i]: the best objective up to node i, the gain of a cut at i not yet counted
    back = np.full(count, -1, dtype=np.int64)
    best[0] = 0.0
    lo = 0  # first predecessor with p[j] - p[lo] <= max_len
    hi = 0  # one past the last predecessor with p[j] - p[i] >= min_len
    for j in range(1, count):
        pj = positions[j]
        while positions[lo] < pj - max_len:
            lo += 1
        while hi < j and positions[hi] <= pj - min_len:
            hi += 1
        top = NEG_INF
        arg = -1
        first = j - 1 if stretches and pj - positions[j - 1] > max_len else lo  # the range is empty then
        for i in range(first, hi):
            if best[i] == NEG_INF:
                continue
            if columns == 1:  # the cut at i starts the chunk [i, j): its gain, for that chunk's length if it has one
                gain = flat[i]
            else:
                gain = gains[i, min(columns - 1, max(0, (tokens[j] - tokens[i]) // step - 1))]
            z = (pj - positions[i] - target) / target  # the length cost λ((L - target) / target)², inlined
            value = (best[i] + gain) - lam * z * z
            if value > top:
                top = value
                arg = i
        if arg >= 0:
            best[j] = top
            back[j] = arg
    last = count - 1
    if best[last] == NEG_INF:
        return NEG_INF, np.zeros(0, dtype=np.int64)
    path = [last]
    node = last
    while node > 0:
        node = back[node]
        path.append(node)
    out = np.empty(len(path), dtype=np.int64)
    for k in range(len(path)):
        out[k] = path[len(path) - 1 - k]
    return best[last], out


def fixed_count(positions, gains, num_chunks, min_len, max_len, target, lam, stretches, tokens, step):
    """Best segmentation into exactly ``num_chunks`` chunks (Eq. 4 of the paper).

    gains, tokens, step: as in ``open_count`` (a cut's gain by the length of the chunk it starts, counted when the
    chunk's end is picked; the start node's gains must be 0).
    The table is O(K * m); instead of a K * m back-pointer table the path is recovered by re-finding
    the best predecessor of each node on the final path, which costs one extra O(K * w) scan.
    stretches: as in ``open_count`` (the prunes by max_len are then off: a stretch may be longer).
    Returns (score, chosen node indices including both ends); score is -inf when infeasible.
    """
    count = positions.shape[0]
    n = positions[count - 1]
    columns = gains.shape[1]
    flat = gains[:, 0]
    table = np.full((num_chunks + 1, count), NEG_INF)  # table[k, j]: k chunks end at node j, a cut at j not counted
    table[0, 0] = 0.0
    for k in range(1, num_chunks + 1):
        remaining = num_chunks - k
        lo = 0
        hi = 0
        for j in range(1, count):
            pj = positions[j]
            # Prune nodes that cannot be reached with k chunks or cannot finish with the rest.
            if pj < k * min_len or n - pj < remaining * min_len:
                continue
            if not stretches and (pj > k * max_len or n - pj > remaining * max_len):
                continue
            if (j == count - 1) != (remaining == 0):
                continue
            while positions[lo] < pj - max_len:
                lo += 1
            while hi < j and positions[hi] <= pj - min_len:
                hi += 1
            top = NEG_INF
            first = j - 1 if stretches and pj - positions[j - 1] > max_len else lo
            for i in range(first, hi):
                prev = table[k - 1, i]
                if prev == NEG_INF:
                    continue
                if columns == 1:
                    gain = flat[i]
                else:
                    gain = gains[i, min(columns - 1, max(0, (tokens[j] - tokens[i]) // step - 1))]
                z = (pj - positions[i] - target) / target
                value = (prev + gain) - lam * z * z
                if value > top:
                    top = value
            table[k, j] = top
    last = count - 1
    score = table[num_chunks, last]
    if score == NEG_INF:
        return NEG_INF, np.zeros(0, dtype=np.int64)
    out = np.empty(num_chunks + 1, dtype=np.int64)
    out[num_chunks] = last
    node = last
    for k in range(num_chunks, 0, -1):
        pj = positions[node]
        want = table[k, node]
        arg = -1
        best_gap = np.inf
        for i in range(node):
            prev = table[k - 1, i]
            length = pj - positions[i]
            stretch = stretches and i == node - 1 and length > max_len
            if prev == NEG_INF or length < min_len or (length > max_len and not stretch):
                continue
            if columns == 1:
                gain = flat[i]
            else:
                gain = gains[i, min(columns - 1, max(0, (tokens[node] - tokens[i]) // step - 1))]
            z = (length - target) / target
            gap = abs((prev + gain) - lam * z * z - want)
            if gap < best_gap:
                best_gap = gap
                arg = i
        node = arg
        out[k - 1] = node
    return score, out
