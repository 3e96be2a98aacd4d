"""Where timing and building happen: every latency the registry records or reports is measured through ``Measurer``
(``measurer``), in worker processes (``worker``, kept by ``pool``, forked by the zygote), and candidates are built by
the ``PersistentBuilder`` (``builder``) on the same workers.

May import ``registry.tvm_side`` and the layers below it. ``types``, ``pool``, ``zygote`` and ``gpu_state`` import no
TVM.
"""
