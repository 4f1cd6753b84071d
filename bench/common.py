"""What every benchmark shares: where the repository and the benchmark data are.

Data location: ``--data-dir``, else ``$RR_FAST_DATA``, else ``../shared/data`` beside the repository root.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def data_dir(argument: str | Path | None = None) -> Path:
    """``--data-dir``, else ``$RR_FAST_DATA``, else ``../shared/data`` beside the repository root."""
    chosen = argument or os.environ.get("RR_FAST_DATA")
    return Path(chosen).expanduser() if chosen else (REPO_ROOT.parent / "shared" / "data").resolve()
