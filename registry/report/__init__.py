"""The per-model report: its table and summary (``model_report``), and the self-contained HTML page with inline-SVG
curves that ``registry report`` and ``--report`` write (``html``, ``svg``).

May import ``registry.store`` only.
"""
