"""Planning: goodput search (and sweeps) over many runs of one workload."""
