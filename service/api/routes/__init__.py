"""Route modules of the v1 API."""
