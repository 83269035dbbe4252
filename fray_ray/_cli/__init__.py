"""The parts of the `fray-ray` command (`fray_ray.cli`): one module per concern.

- `background`: `fray-ray start` without `--block` (a cluster process of its own, recorded in
  the per-user address file) and `fray-ray down` / `stop --cluster`;
- `status`: `fray-ray status`, nodes, resources and pending demand read from the controller;
- `jobs`: `fray-ray jobs` as a table of full ids or as JSON.
"""
