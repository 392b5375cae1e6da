"""vllm"""

__all__: list[str] = []
