"""Operator similarity: fixed-length embeddings of workload signatures and a FAISS index over them. No TVM here."""
