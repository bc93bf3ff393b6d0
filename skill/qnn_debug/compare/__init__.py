"""Compare a target run with a trusted reference: metrics, alignment, localisation, verdict, report.

Reading order for newcomers: ``schema`` (what a comparison returns) → ``pipeline.compare_runs`` (the
stages in order: ``align`` → ``rows`` → ``localise`` → ``checks`` → ``patterns`` → ``verdict`` →
``wording``) → any one stage (how the first failing op is found, judged and put into words). Nothing here imports numpy or onnx at package import time, so the CLI and the MCP
server can import ``qnn_debug.compare.schema`` cheaply.
"""
