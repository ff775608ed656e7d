"""argparse types shared by the benchmark scripts."""

from __future__ import annotations

import argparse


def runs(text: str) -> int:
    """``--runs``: a whole number, 1 or more (0 ran nothing and reported an
    empty or failing median)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {n}")
    return n
