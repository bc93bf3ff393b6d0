"""LLM export checks, the tiny Qwen3-shaped test model, and text/logits comparison."""
