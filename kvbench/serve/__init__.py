"""`kvbench serve`: an OpenAI-compatible server whose timing comes from a fixed plan or the simulator."""
