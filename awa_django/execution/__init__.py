"""One attempt of one job, from claim to committed outcome: the handler's context, the pure
outcome plan and the lifecycle both schedulers (the worker, the inline runner) share."""
