"""The ``registry`` command line (shipped inside the package as ``registry.cli``)."""
