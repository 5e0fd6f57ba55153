"""Benchmarks: each module exposes ``main() -> dict`` of measured figures and runs as ``python -m``."""
