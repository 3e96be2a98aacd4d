"""Fallback tuning: MetaSchedule's search driven batch by batch, predictor-ranked, trimmed and parallel-measured.

- ``runner``: measures candidates several at a time, and re-checks the promising ones alone and precisely.
- ``calibrate``: picks how many to measure at once on this machine.
- ``engine``: the per-batch loop over a model's tasks, writing every record to the registry as it is measured.
"""
