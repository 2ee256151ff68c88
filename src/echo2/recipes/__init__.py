"""Shipped recipes that are more than a config: an agent and the examples it plays."""
