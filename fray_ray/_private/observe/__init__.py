"""What a run records for people to see: task events for the state API and the timeline,
application metrics, worker output forwarded to the driver and folded there, progress bars."""
