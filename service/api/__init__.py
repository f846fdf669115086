"""The HTTP and websocket API (FastAPI)."""
