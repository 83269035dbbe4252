"""What only a worker process runs: executors, actor hosts, the worker runtime that forwards the
API to the driver, and the checks a worker makes before it connects. It never imports `driver`."""
