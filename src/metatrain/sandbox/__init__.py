"""Process sandbox for agent-written Python: Landlock, network namespace, rlimits, clean env."""

from metatrain.sandbox.policy import SandboxPolicy, default_read_paths
from metatrain.sandbox.runner import SandboxError, SandboxResult, isolation_report, run_sandboxed

__all__ = [
    "SandboxError",
    "SandboxPolicy",
    "SandboxResult",
    "default_read_paths",
    "isolation_report",
    "run_sandboxed",
]
