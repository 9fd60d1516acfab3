"""Errors raised by the embedded-model machinery."""

from __future__ import annotations


class ModelError(RuntimeError):
    """An embedded model cannot be found, verified, converted or loaded."""


class ModelNotPrepared(ModelError):
    """The model is not prepared and preparing it needs a step the caller did not allow (e.g. pip)."""
