"""mnn-qnn-debug engine: baselines, QNN targets, dump readers, comparison and diagnosis.

This package never imports the MCP SDK; the server package calls into it.
"""

__version__ = "0.1.0"
