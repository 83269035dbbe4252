"""What only the driver runs: the driver runtime and its session service, the task scheduler
and executor pools, actors and their calls, gangs, placement groups, the launcher and lease, the
cluster's view and ledger, streams, and the state API's sources. It never imports `workers`."""
