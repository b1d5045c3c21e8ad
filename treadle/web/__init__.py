"""Treadle's HTTP services, on one framework: Starlette apps served by uvicorn.

http.py      what every service shares: JSON errors, routes with their methods, bodies
             read with a limit and a deadline, a client gone early is one log line
serve.py     the uvicorn runner: bind (loopback by default), serve in the loop, stop gracefully
ping.py      the cron monitors' service: ping URLs and the live event stream (the HTTP)
checkins.py  what a ping does: its check-in fields, its key checked, the monitor signalled
events.py    the event hub: each monitor's stream read once, fanned out to every client
codec.py     the codec server for the Temporal Web UI and CLI
"""
