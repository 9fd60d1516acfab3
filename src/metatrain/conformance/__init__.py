"""The family conformance kit: checks every task family must pass (``metatrain check-family``)."""

from metatrain.conformance.checks import CheckResult, check_family, failed

__all__ = ["CheckResult", "check_family", "failed"]
