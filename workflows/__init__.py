"""Deterministic workflow code, one package per feature: ``agent``, ``jobs``, ``monitors``;
``cron`` (cron expressions) is shared by jobs and monitors. No I/O, clock, randomness or
environment here except through ``workflow.*``."""
