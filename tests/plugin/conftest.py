"""TreadlePlugin in a user's own client and worker, and Treadle's public names (``treadle``'s
``__all__``). Upgrades across builds with the plugin's deployment options are in
tests/durability/test_worker_deployments.py.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
