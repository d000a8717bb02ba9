"""The LLM: a Llama-family decoder over a paged KV cache (model.py), iteration-level
scheduling with selective batching (scheduler.py, engine.py), the tokenizer and chat
templates, and what Vigil asks of it: scene captions (captions.py) and grounded answers
(qa.py)."""
