"""The service shell: HTTP (FastAPI), Redis (state, data log, pub/sub), workers, CLI."""
