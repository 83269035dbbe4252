import ray


@ray.remote
class Tally:
    """A running total that any driver of the cluster may add to."""

    def __init__(self) -> None:
        self.sum = 0

    def add(self, amount: int) -> int:
        self.sum += amount
        return self.sum

    def total(self) -> int:
        return self.sum
