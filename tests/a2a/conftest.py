"""Treadle as an A2A agent (``treadle.web.a2a``), tested with the ``a2a-sdk``'s own client
against a real uvicorn server, the real dev server, a real worker and the scripted model."""
