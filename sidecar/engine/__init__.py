"""The engine: the agent loop, model providers and tools."""

from .loop import AgentLoop

__all__ = ["AgentLoop"]
