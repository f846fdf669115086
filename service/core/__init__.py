"""Settings and process-wide plumbing."""
