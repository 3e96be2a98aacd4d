"""A corpus of real third-party ONNX models (issue #10): the catalogue, how each file is made, and the checks run on
them (import with the registry's frontend, onnxruntime reference timings). See bench/corpus/README.md."""
