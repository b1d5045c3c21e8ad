"""Cron monitors: ``MonitorWorkflow`` (check-ins, missed-run and timeout detection on durable
timers), its pure ledger, and the monitor messages. Deterministic."""
