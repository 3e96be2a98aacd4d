"""Where timing happens: every latency the registry records or reports is measured through ``Measurer``.

- ``measurer``: the interface, on this machine (CPU or GPU) or on the servers behind a TVM RPC tracker.
- ``worker``: the process a measurement runs in; ``pool`` keeps those processes and survives their crashes.
- ``inputs``: in-range values for integer arguments (token ids, gather indices), derived from the program.
- ``calibrate``: how many kernels to measure at once on this machine.
- ``types``: the plain data of the interface (jobs, settings, measurements, device descriptions); no TVM.
"""
