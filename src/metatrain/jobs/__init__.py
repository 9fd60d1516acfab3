"""Job bundles, the file queue, the worker and the runner (pre-eval -> train -> post-eval)."""
