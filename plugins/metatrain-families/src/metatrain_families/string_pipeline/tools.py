"""string_pipeline's eval tools. Their signatures and docstrings are the eval tool interface."""

from __future__ import annotations


def _int(value: object, name: str) -> int:
    try:
        return int(value)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def reverse(text: str) -> str:
    """Reverse a string.

    Args:
        text: The string to reverse.

    Returns:
        The characters of text in reverse order.
    """
    return str(text)[::-1]


def uppercase(text: str) -> str:
    """Convert a string to uppercase.

    Args:
        text: The string to convert.

    Returns:
        text with every letter in uppercase.
    """
    return str(text).upper()


def lowercase(text: str) -> str:
    """Convert a string to lowercase.

    Args:
        text: The string to convert.

    Returns:
        text with every letter in lowercase.
    """
    return str(text).lower()


def replace_char(text: str, old: str, new: str) -> str:
    """Replace every occurrence of one character with another.

    Args:
        text: The string to change.
        old: The single character to replace (case-sensitive).
        new: The single character to put in its place.

    Returns:
        text with every old character replaced by new.
    """
    if len(str(old)) != 1 or len(str(new)) != 1:
        raise ValueError(f"old and new must be single characters, got old={old!r} new={new!r}")
    return str(text).replace(str(old), str(new))


def every_kth(text: str, k: int) -> str:
    """Keep every k-th character, starting with the first.

    Args:
        text: The string to thin out.
        k: The step between kept characters (1 keeps everything, 2 keeps positions 1, 3, 5, ...).

    Returns:
        The characters of text at positions 0, k, 2k, ...
    """
    step = _int(k, "k")
    if step < 1:
        raise ValueError(f"k must be at least 1, got {step}")
    return str(text)[::step]


def rotate_left(text: str, n: int) -> str:
    """Rotate a string to the left: move its first n characters to the end.

    Args:
        text: The string to rotate.
        n: How many characters to move from the front to the back.

    Returns:
        text[n:] + text[:n] (n taken modulo the length).
    """
    s = str(text)
    shift = _int(n, "n") % len(s) if s else 0
    return s[shift:] + s[:shift]


def dedupe(text: str) -> str:
    """Remove repeated characters, keeping the first occurrence of each (case-sensitive).

    Args:
        text: The string to deduplicate.

    Returns:
        text without any character that already appeared earlier in it.
    """
    return "".join(dict.fromkeys(str(text)))


TOOLS = (reverse, uppercase, lowercase, replace_char, every_kth, rotate_left, dedupe)
