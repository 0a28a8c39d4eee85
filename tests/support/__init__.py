"""Helpers shared by the test modules: hand-built logs, a fault-injecting server, sim shortcuts."""
