"""Synchronous data-parallel training with a parameter server.

A linear-regression model y = X @ w + b is trained on four data shards. Each round the driver
fetches the current weights from the ParameterServer actor as an ObjectRef, hands that ref to
every DataWorker actor (each holds one shard and computes the gradient of the mean squared error
on it), and sends the gradient refs straight back to the parameter server, which averages them
and takes an SGD step. A plain task evaluates the loss on a held-out set after each round.
"""

import numpy as np
import ray

NUM_FEATURES = 3
NUM_WORKERS = 4
ROUNDS = 8
LEARNING_RATE = 0.3


def make_data(rng, n):
    true_w = np.array([2.0, -3.0, 0.5])
    true_b = 1.25
    x = rng.normal(size=(n, NUM_FEATURES))
    y = x @ true_w + true_b + 0.05 * rng.normal(size=n)
    return x, y


@ray.remote
class ParameterServer:
    def __init__(self, num_features, learning_rate):
        self.w = np.zeros(num_features)
        self.b = 0.0
        self.learning_rate = learning_rate
        self.updates = 0

    def get_weights(self):
        return self.w.copy(), self.b

    def apply_gradients(self, *gradients):
        grad_w = np.mean([g[0] for g in gradients], axis=0)
        grad_b = float(np.mean([g[1] for g in gradients]))
        self.w -= self.learning_rate * grad_w
        self.b -= self.learning_rate * grad_b
        self.updates += 1
        return self.w.copy(), self.b

    def num_updates(self):
        return self.updates


@ray.remote
class DataWorker:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def compute_gradient(self, weights):
        w, b = weights
        error = self.x @ w + b - self.y
        grad_w = 2.0 * self.x.T @ error / len(self.y)
        grad_b = 2.0 * float(np.mean(error))
        return grad_w, grad_b


@ray.remote
def evaluate(weights, data):
    w, b = weights
    x, y = data
    return float(np.mean((x @ w + b - y) ** 2))


def main():
    ray.init(num_cpus=2)
    rng = np.random.default_rng(2024)
    x, y = make_data(rng, 400)
    test_ref = ray.put(make_data(rng, 100))

    ps = ParameterServer.remote(NUM_FEATURES, LEARNING_RATE)
    workers = [
        DataWorker.remote(x_shard, y_shard)
        for x_shard, y_shard in zip(np.array_split(x, NUM_WORKERS), np.array_split(y, NUM_WORKERS))
    ]

    weights_ref = ps.get_weights.remote()
    print(f"round 0: test loss {ray.get(evaluate.remote(weights_ref, test_ref)):.4f}")
    for round_no in range(1, ROUNDS + 1):
        gradient_refs = [worker.compute_gradient.remote(weights_ref) for worker in workers]
        weights_ref = ps.apply_gradients.remote(*gradient_refs)
        loss = ray.get(evaluate.remote(weights_ref, test_ref))
        print(f"round {round_no}: test loss {loss:.4f}")

    w, b = ray.get(weights_ref)
    print("updates applied:", ray.get(ps.num_updates.remote()))
    print("final weights:", [round(float(v), 3) for v in w])
    print("final bias:", round(float(b), 3))
    ray.shutdown()


if __name__ == "__main__":
    main()
