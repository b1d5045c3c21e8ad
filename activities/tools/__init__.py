"""Tools: the ``run_tool`` activity and the built-in tools (``builtin``), confined to the run's
workspace (``workspace``)."""
