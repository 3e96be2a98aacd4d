"""registry: a tuning-record database and transfer-tuning registry for Apache TVM MetaSchedule.

Importing this package is cheap and never imports TVM; ``RegistryDatabase`` (which does) loads on first use::

    from registry import Store, RegistryDatabase
"""

from __future__ import annotations

from registry.errors import RegistryError

__all__ = ["RegistryDatabase", "RegistryError", "Store"]


def __getattr__(name: str):
    if name == "Store":
        from registry.store.store import Store

        return Store
    if name == "RegistryDatabase":
        from registry.tvm_side.database import RegistryDatabase

        return RegistryDatabase
    raise AttributeError(name)
