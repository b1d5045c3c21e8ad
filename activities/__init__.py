"""Everything with I/O, one package per concern: ``model`` (providers over httpx), ``tools``
(the workspace tools), ``jobs`` (the built-in maintenance jobs); ``errors``, ``heartbeat`` and
``offload`` are shared by all of them."""
