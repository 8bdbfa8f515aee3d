"""Proxies shipped with acp-conductor."""
