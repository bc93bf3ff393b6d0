"""Compare a target run with a trusted reference: metrics, alignment, localisation, verdict, report.

Reading order for newcomers: ``schema`` (what a comparison returns) → ``engine.compare_runs`` (the
pipeline) → ``localize`` / ``local_error`` / ``patterns`` / ``verdict`` (how the first failing op is
found and judged). Nothing here imports numpy or onnx at package import time, so the CLI and the MCP
server can import ``qnn_debug.compare.schema`` cheaply.
"""
