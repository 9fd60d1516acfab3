"""calc_chain's eval tools. Their signatures and docstrings are the eval tool interface."""

from __future__ import annotations


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum a + b.
    """
    return int(a) + int(b)


def subtract(a: int, b: int) -> int:
    """Subtract one integer from another.

    Args:
        a: The integer to subtract from.
        b: The integer to subtract.

    Returns:
        The difference a - b.
    """
    return int(a) - int(b)


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product a * b.
    """
    return int(a) * int(b)


TOOLS = (add, subtract, multiply)
