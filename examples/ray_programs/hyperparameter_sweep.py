"""A grid search run as Ray tasks, with at most MAX_IN_FLIGHT trials running at once.

Every trial trains a ridge-regression model by gradient descent on the same training set (put
in the object store once and passed by reference) and reports its validation error. The driver
submits trials until MAX_IN_FLIGHT are pending, then uses ray.wait to take whichever finishes
first before submitting the next one. Results are printed sorted, so the output does not depend
on the order in which trials finish. Trials whose loss blows up raise an exception in the task;
the driver catches it by its own type when it fetches the result.
"""

import itertools

import numpy as np
import ray

MAX_IN_FLIGHT = 3

SEARCH_SPACE = {
    "learning_rate": [0.01, 0.05, 0.2, 1.5],
    "l2": [0.0, 0.1, 1.0],
    "epochs": [20, 60],
}


def make_dataset(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(300, 5))
    true_w = rng.normal(size=5)
    y = x @ true_w + 0.3 * rng.normal(size=300)
    return (x[:200], y[:200]), (x[200:], y[200:])


class TrialDiverged(ValueError):
    pass


@ray.remote
def run_trial(config, dataset):
    (x_train, y_train), (x_val, y_val) = dataset
    w = np.zeros(x_train.shape[1])
    start_loss = float(np.mean(y_train**2))
    for epoch in range(config["epochs"]):
        grad = 2.0 * x_train.T @ (x_train @ w - y_train) / len(y_train) + 2.0 * config["l2"] * w
        w -= config["learning_rate"] * grad
        if float(np.mean((x_train @ w - y_train) ** 2)) > 10 * start_loss:
            raise TrialDiverged(f"diverged at epoch {epoch}")
    val_mse = float(np.mean((x_val @ w - y_val) ** 2))
    return config, round(val_mse, 4)


def config_key(config):
    return tuple(config[name] for name in sorted(config))


def describe(config):
    return ", ".join(f"{name}={config[name]}" for name in sorted(config))


def main():
    ray.init(num_cpus=2)
    dataset_ref = ray.put(make_dataset(seed=7))

    names = sorted(SEARCH_SPACE)
    configs = [dict(zip(names, values)) for values in itertools.product(*(SEARCH_SPACE[n] for n in names))]

    config_of = {}  # ObjectRef -> config, to report failed trials
    results = []
    failures = []

    def collect(done_refs):
        for ref in done_refs:
            try:
                results.append(ray.get(ref))
            except TrialDiverged as exc:
                # Ray re-raises the task's exception as a RayTaskError that is also a
                # TrialDiverged; .cause is the exception the task raised.
                failures.append((config_of[ref], str(exc.cause)))

    in_flight = []
    most_in_flight = 0
    for config in configs:
        if len(in_flight) >= MAX_IN_FLIGHT:
            done, in_flight = ray.wait(in_flight, num_returns=1)
            collect(done)
        ref = run_trial.remote(config, dataset_ref)
        config_of[ref] = config
        in_flight.append(ref)
        most_in_flight = max(most_in_flight, len(in_flight))
    while in_flight:
        done, in_flight = ray.wait(in_flight, num_returns=1)
        collect(done)

    results.sort(key=lambda item: (item[1], config_key(item[0])))
    failures.sort(key=lambda item: config_key(item[0]))
    print(f"trials: {len(configs)} submitted, {len(results)} finished, {len(failures)} diverged "
          f"(at most {most_in_flight} in flight)")
    best_config, best_score = results[0]
    print(f"best: {describe(best_config)} -> val_mse {best_score:.4f}")
    print(f"{'epochs':>6} {'l2':>5} {'learning_rate':>13}  val_mse")
    for config, score in results:
        print(f"{config['epochs']:>6} {config['l2']:>5} {config['learning_rate']:>13}  {score:.4f}")
    for config, reason in failures:
        print(f"{config['epochs']:>6} {config['l2']:>5} {config['learning_rate']:>13}  failed: {reason}")
    ray.shutdown()


if __name__ == "__main__":
    main()
