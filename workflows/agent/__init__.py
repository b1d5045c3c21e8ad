"""The agent run, in rooms that import only downward (import-linter keeps it so):

- the loop's own files, here: ``workflow`` (AgentWorkflow), ``engine`` (the state table's
  driver), ``handlers`` (signals, updates, queries), ``calls`` (every activity, with its
  options), ``acting``, ``post_tools``, ``snapshotting``, ``compressing``, ``fallback``;
- ``subagents``: child runs started by ``delegate``;
- ``parts``: the run's parts, its one state model (``parts.state``) first;
- ``messages``: what it exchanges with clients and activities (``messages.models``).

Deterministic code only. This package's ``__init__`` stays empty so that activities can import
the messages without loading the workflow (which imports the activities, inside the sandbox
pass-through).
"""
