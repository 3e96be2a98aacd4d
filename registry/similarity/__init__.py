"""Operator similarity: the FAISS index over the stored workloads' embeddings (``index``), and the choice of donors
for a task (``donors``). The embedding itself is computed where it is stored (``registry.store.embedding``).

May import ``registry.store`` only. No TVM here.
"""
