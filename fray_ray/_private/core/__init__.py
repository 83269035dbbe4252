"""What the API hands out and what a call carries, in every process: refs, generators, placement
group handles, scheduling strategies, runtime envs, task specs and context, running user code,
tracebacks; the `CoreRuntime` interface (`runtime`) and the process's runtime (`runtime_state`)."""
