"""One model's journey: extract its tasks, transfer schedules from similar stored ones, tune what is left (the engine,
its planner and its rules), compile, report.

May import ``registry.records`` and the layers below it; never ``registry.share``, ``registry.api`` or the CLI.
"""
