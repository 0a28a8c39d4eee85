"""Real inference servers for the live test tiers: build/start llama-server and vLLM-CPU, write tiny models."""
