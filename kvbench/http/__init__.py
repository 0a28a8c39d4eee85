"""The OpenAI-compatible HTTP target: profiles, prompt synthesis, SSE parsing, streaming client, workers, scraping."""
