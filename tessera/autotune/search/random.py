"""Random search: fresh samples of the space, the baseline the learned searches are judged against."""
from __future__ import annotations

from .base import SearchStrategy


class RandomSearch(SearchStrategy):
    name = "random"

    def propose(self, n: int) -> list:
        return self.take(self.fresh(n), n)
