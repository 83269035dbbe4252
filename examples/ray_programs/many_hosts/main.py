"""A Ray program for a cluster of many hosts.

    python main.py ADDRESS [MOVE_TO]            # on Ray: ADDRESS of a `ray start` head
    fray-ray run main.py ADDRESS [MOVE_TO]      # on an Iris controller, unmodified

Its code lives in this directory, which travels to the workers as the job's `working_dir`
(with MOVE_TO, the directory is moved away right after `ray.init`: the workers must not need
it). Tasks read a file of the working dir, take per-task environment variables, meet on two
hosts at once, an actor holds two CPUs for its lifetime, and a second driver
(`second_driver.py`, started when this one prints `tally ready`) calls that named actor.
What depends on the cluster's layout (how many hosts the tasks met on) goes to stderr; stdout
is the same on every cluster.
"""

import os
import shutil
import sys
import time

import ray
from shapes import geometry
from shapes.tally import Tally

address = sys.argv[1]
ray.init(address=address, namespace="many-hosts", runtime_env={"working_dir": "."})
if len(sys.argv) > 2:
    shutil.move(os.getcwd(), sys.argv[2])


@ray.remote
def area(side: int) -> str:
    with open("data/unit.txt") as f:  # a file of the working dir, in the task's own copy
        unit = f.read().strip()
    return f"{geometry.square_area(side)} {unit} (precision {os.environ['PRECISION']})"


@ray.remote(num_cpus=0)
class Rendezvous:
    """Tells tasks when all of them are running at once."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = 0

    def arrive(self) -> None:
        self.arrived += 1

    def everyone_here(self) -> bool:
        return self.arrived >= self.expected


@ray.remote(num_cpus=8)
def meet(rendezvous) -> str:
    """Holds eight CPUs until the other one runs too: together they need two 8-core hosts."""
    ray.get(rendezvous.arrive.remote())
    while not ray.get(rendezvous.everyone_here.remote()):
        time.sleep(0.05)
    return ray.get_runtime_context().get_node_id()


def wait_until(condition, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


print("areas", ray.get([area.options(runtime_env={"env_vars": {"PRECISION": str(i)}}).remote(i) for i in (1, 2, 3)]))

rendezvous = Rendezvous.remote(2)
nodes = ray.get([meet.remote(rendezvous) for _ in range(2)])
print("met", len(nodes), "tasks of 8 CPUs at once")
print("hosts", len(set(nodes)), file=sys.stderr)

tally = Tally.options(name="tally", num_cpus=2).remote()
ray.get(tally.add.remote(0))
total_cpus = ray.cluster_resources()["CPU"]
print("tally holds 2 CPUs:", wait_until(lambda: ray.available_resources().get("CPU", 0) == total_cpus - 2))

print("tally ready", flush=True)
print("second driver seen:", wait_until(lambda: ray.get(tally.total.remote()) >= 100))
print("tally after the second driver:", ray.get(tally.add.remote(1)))
ray.shutdown()
