"""pytest_vllmqual: LLM serve qualification as pytest tests."""

__version__ = "0.1.0"
