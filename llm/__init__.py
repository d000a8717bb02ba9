"""LLM engine (iteration-level scheduling, paged KV cache), scene captions and question
answering. Not built yet: see the project's issues."""
