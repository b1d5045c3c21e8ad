"""Scheduled agents: an agent task on a Temporal Schedule, watched by its own cron monitor."""
