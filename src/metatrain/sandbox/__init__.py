"""Process sandbox for agent-written Python.

``run_sandboxed(policy, "pkg.mod:func", payload)`` runs ``func(**payload)`` in a fresh child
interpreter (``sandbox/child.py``, started by path so no package ``__init__`` runs unrestricted).
Layers, each reported in ``SandboxResult.isolation`` (``level`` is "full" or "degraded"):

- environment built from scratch, secret-looking names/values dropped;
- rlimits (CPU, address space, file size, open files, no core dumps), new session, wall timeout
  enforced by killing the process group;
- new network namespace and a private mount namespace (fresh /dev/shm, empty /run);
- Landlock: read-only stdlib/site-packages/system paths (``default_read_paths``), read-write
  workspace and private tmp, denied packages unreadable, TCP denied, signals and abstract UNIX
  sockets scoped to the sandbox;
- no_new_privs and every capability dropped (we may run as root).

Target modules are found through ``SandboxPolicy.sys_path`` (or ``PYTHONPATH`` in
``policy.env``), which the child adds only after it has restricted itself.
"""

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
