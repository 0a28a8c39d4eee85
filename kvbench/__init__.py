"""kvbench: trace-driven benchmark and evaluation suite for LLM inference serving."""

__version__ = "0.1.0"
