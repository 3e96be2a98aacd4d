"""What a record must be before it is stored: the one check every write path calls, and what it needs.

May import ``registry.measure``, ``registry.store`` and the modules below them; never the pipeline above it.
"""
