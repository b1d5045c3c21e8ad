"""Periodic jobs: ``JobWorkflow`` (one run of a job, started by a Temporal Schedule), the
per-job ``JobLedgerWorkflow`` (history and statistics) and the job messages. Deterministic."""
