"""Ray's utility modules: placement groups, actor pools, queues, TPU helpers, scheduling strategies."""
