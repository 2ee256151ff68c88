"""The agent gateway: model calls of an agent's own harness served by the fleet, recorded token for token."""
