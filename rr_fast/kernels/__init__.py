"""Compiled inner loops, isolated so the rest of the package stays plain Python."""

from rr_fast.kernels.dp import fixed_count, open_count

__all__ = ["fixed_count", "open_count"]
