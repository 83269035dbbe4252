"""`ray._private.services`: of Ray's process-management module, the name training code calls.

RL launchers call `get_node_ip_address()` in an actor's constructor to pick the address a
rendezvous (torch.distributed, NCCL) listens on. It is `ray.util.get_node_ip_address`: the
address the cluster advertises for this host. Ray's functions that start and stop its own
daemons have no counterpart.
"""

from fray_ray.util import get_node_ip_address

__all__ = ["get_node_ip_address"]
