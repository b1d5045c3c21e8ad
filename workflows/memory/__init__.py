"""Long-term memory across threads: one entity workflow per namespace (``MemoryWorkflow``)
holding what runs remembered, written by updates, read by a query."""
