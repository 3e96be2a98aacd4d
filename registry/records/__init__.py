"""What a record must be before it is stored, and the doors records pass through: the one validation (``validator``,
replayed in ``replay_pool``'s workers), the one write door (``write``), MetaSchedule's database over the registry
(``database``), moving a trace between copies of a workload (``rebase``), and ``registry check`` (``audit``).

May import ``registry.measure`` and the layers below it.
"""
