"""Fallback tuning: MetaSchedule's search driven batch by batch, predictor-ranked, trimmed and parallel-measured.

- ``engine``: the per-batch loop over a model's tasks, writing every record to the registry as it is measured.
  Measurement itself, and the calibration of how many to measure at once, live in ``registry.measure``.
"""
