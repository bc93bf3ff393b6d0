"""MCP face of mnn-qnn-debug: thin tools that validate arguments and call the ``qnn_debug`` engine."""

__version__ = "0.1.0"
