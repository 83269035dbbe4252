"""A second driver of the same cluster: finds main.py's named actor and calls it.

    python second_driver.py ADDRESS         # or: fray-ray run second_driver.py ADDRESS
"""

import sys

import ray

ray.init(address=sys.argv[1], namespace="many-hosts")
tally = ray.get_actor("tally")
print("second driver adds 100:", ray.get(tally.add.remote(100)))
ray.shutdown()
