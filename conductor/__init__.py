"""acp-conductor: run chains of ACP proxies in front of an agent, presented as one agent."""

__version__ = "0.1.0"
