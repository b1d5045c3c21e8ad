"""Sub-agents: a ``delegate`` call run as a child ``AgentWorkflow`` (``delegation``), its end
awaited and observed (``ends``), its reports to its parent while it runs (``reports``) and its
client queries answered through its parent (``queries``). Imports the run's parts and messages,
never the loop's own files above it (import-linter)."""
