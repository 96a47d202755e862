"""Delegation to remote A2A agents: the client, the journal-backed delegation tool, the coordinator."""
