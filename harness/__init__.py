"""Measurement harness for distributed LLM inference."""

__version__ = "0.1.0"
