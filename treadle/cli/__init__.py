"""``treadle`` sub-commands: ``jobs``, ``monitors``, and how a command-line process exits."""
