"""Registry to registry: bundles, sync, TVM's log files in and out, the shipped starter bundle, verifying what others
measured, and overlays (a registry read under another that takes the writes).

May import ``registry.records`` and the layers below it; never ``registry.pipeline``, ``registry.api`` or the CLI.
"""
