"""registry: a tuning-record database and transfer-tuning registry for Apache TVM MetaSchedule.

Importing this package is cheap and never imports TVM; the functions and ``RegistryDatabase`` load it on first use::

    import registry

    db = registry.database()  # a MetaSchedule database for this machine's device, as the CLI files records
    report = registry.transfer("model.onnx", output="model.so")  # the report `registry transfer` prints

See ``registry.api`` for ``host_target``, ``host_device``, ``database``, ``compile_model``, ``load_model``,
``task_module``, ``transfer``, ``tune``, ``tune_models`` and ``train_predictor``.
"""

from __future__ import annotations

from registry.api import (
    ModelSpec,
    compile_model,
    database,
    host_device,
    host_target,
    load_model,
    task_module,
    train_predictor,
    transfer,
    tune,
    tune_models,
)
from registry.errors import RegistryError

__all__ = [
    "ModelReport",
    "ModelSpec",
    "RegistryDatabase",
    "RegistryError",
    "Store",
    "compile_model",
    "database",
    "host_device",
    "host_target",
    "load_model",
    "task_module",
    "train_predictor",
    "transfer",
    "tune",
    "tune_models",
]


def __getattr__(name: str):
    if name == "Store":
        from registry.store.factory import store_class

        return store_class()
    if name == "RegistryDatabase":
        from registry.records.database import RegistryDatabase

        return RegistryDatabase
    if name == "ModelReport":
        from registry.report.model_report import ModelReport

        return ModelReport
    raise AttributeError(name)
