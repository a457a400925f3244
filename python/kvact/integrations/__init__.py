"""kvact.integrations — adapters that plug kvact into serving engines (vllm.py: vLLM's KV connector)."""
