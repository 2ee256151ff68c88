"""The wire's defences and plumbing, shared by every echo2 HTTP server and client: the guard
in front of every server (credentials before a body byte, body limits, slow clients cut off:
``guard.py``, ``deadlines.py``), per-address rate limits (``ratelimit.py``), TLS and certificate
pinning (``tls.py``), the background uvicorn server (``serving.py``), and credentials kept out
of logs (``redact.py``)."""
