"""Workloads: readers of trace files and generators, all yielding Request streams sorted by arrival time."""
