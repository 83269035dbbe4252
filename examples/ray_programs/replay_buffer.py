"""Reinforcement learning's data flow: rollout workers, a replay buffer and a learner.

Rollout tasks ask an environment actor for trajectories (numpy arrays, every other one larger
than 100 KiB) and hand the refs, unread, to a replay buffer actor that keeps the most recent
ones. The learner asks the buffer for a batch: the buffer's answer passes the refs on, still
unread, and the learner reads them. The driver only starts the work and prints what the learner
saw: the trajectories go from the workers that made them to the learner.
"""

import numpy as np
import ray


@ray.remote
class Environment:
    def __init__(self, scale):
        self.scale = scale

    def trajectory(self, worker, step, length):
        rewards = np.full(length, self.scale * (worker + 1) + step, dtype=np.float64)
        return {"worker": worker, "step": step, "rewards": rewards}


@ray.remote
class ReplayBuffer:
    def __init__(self, capacity):
        self.capacity = capacity
        self.refs = []

    def add(self, refs):
        self.refs.extend(refs)
        del self.refs[:-self.capacity]  # the oldest are let go
        return len(self.refs)

    def sample(self, size):
        # The newest refs go to the learner unread: it fetches the trajectories itself.
        return self.refs[-size:]


@ray.remote
class Learner:
    def __init__(self):
        self.seen = 0
        self.total = 0.0

    def train(self, buffer, size):
        batch = ray.get(ray.get(buffer.sample.remote(size)))
        self.seen += len(batch)
        self.total += sum(float(trajectory["rewards"].sum()) for trajectory in batch)
        return [(trajectory["worker"], trajectory["step"], len(trajectory["rewards"])) for trajectory in batch]

    def summary(self):
        return self.seen, self.total


@ray.remote
def rollout(environment, buffer, worker, steps):
    kept = 0
    for step in range(steps):
        length = 20_000 if step % 2 else 100  # 160 kB, or 800 bytes
        kept = ray.get(buffer.add.remote([environment.trajectory.remote(worker, step, length)]))
    return kept


def main():
    ray.init()
    environments = [Environment.remote(scale) for scale in (1, 10)]
    buffer, learner = ReplayBuffer.remote(6), Learner.remote()
    for worker in range(3):
        kept = ray.get(rollout.remote(environments[worker % 2], buffer, worker, 4))
        print(f"worker {worker} done, buffer holds {kept}")
        print("batch", ray.get(learner.train.remote(buffer, 3)))
    seen, total = ray.get(learner.summary.remote())
    print(f"learner saw {seen} trajectories, reward total {total:.1f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
