"""Graphs and export folders the tests, the demo's LLM cases and the benches build: never imported by the product.

The product (``qnn_debug``, ``qnn_debug_mcp``) reads what users bring; this package writes look-alikes of what
llmexport writes (an import-linter contract keeps the product from importing it). Prefer the real exporter's
output (``tests/real_exports.py``) wherever speed allows; these builders stay for fast tests and sized benches.
"""
