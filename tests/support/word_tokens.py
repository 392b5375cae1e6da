"""A word-per-token vocabulary for the small in-process servers of the gate unit tests.

A real vLLM cannot be made to answer in a chosen way on demand, so those tests serve their own
``/tokenize``; both count one token per whitespace-separated word, numbered in first-seen order."""

from __future__ import annotations

import threading


class WordTokens:
    """Token IDs of words, shared by the server's request threads."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.lock = threading.Lock()

    def ids(self, text: str) -> list[int]:
        with self.lock:
            for word in text.split():
                if word not in self.words:
                    self.words.append(word)
            return [self.words.index(word) for word in text.split()]
