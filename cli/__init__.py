"""The ``registry`` command line: click commands only, each parsing its options and printing what the layers below
return (tables, ``--json`` through the pydantic models of ``schemas``, progress, one-line errors).

May import every layer; imports TVM only inside the commands that need it (``lookup`` never does).
"""
