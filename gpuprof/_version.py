"""The version of this code, installed or not (pyproject.toml's must match: tests/test_api.py)."""

__version__ = "0.1.0"
