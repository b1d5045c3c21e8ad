"""Everything with I/O, one package per concern: ``model`` (providers over httpx), ``tools``
(the workspace tools), ``jobs`` (the built-in maintenance jobs); ``errors`` and ``heartbeat``
are shared by all of them."""
