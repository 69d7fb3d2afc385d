"""Running cells: the plan and cache keys, launching and supervising processes, the stored results."""
