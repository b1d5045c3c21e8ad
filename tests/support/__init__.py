"""What the rooms share: the harness, worker processes, servers and helpers of the suite."""
