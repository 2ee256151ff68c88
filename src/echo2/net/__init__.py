"""The wire's defences and plumbing, shared by every echo2 HTTP server and client: the guard
in front of every server (credentials before a body byte, body limits, slow clients cut off:
``guard.py``, ``deadlines.py``), per-address rate limits (``ratelimit.py``), TLS and certificate
pinning (``tls.py``), the background uvicorn server (``serving.py``), and credentials kept out
of logs (``redact.py``).

**The wire: credentials, body limits, TLS.** Workers are untrusted and the network may be too; what
crosses it is guarded as follows.

*Three credentials, one header* (``X-Echo2-Token``). The *run token* (generated, or
``coordinator.token``) only registers. Registering returns a *session credential*
``<worker id>.<secret>`` (looked up by the id, its secret compared with ``hmac.compare_digest``) that
every other coordinator route takes, and the run's *broadcast credential*
``HMAC-SHA256(run token, "echo2-broadcast")`` (hex), the only one the chunk routes (``/v1/broadcast``,
on the learner and on every relay) accept and the only one a worker ever sends to a relay. A relay
belongs to whoever registered it, so it must learn nothing that opens more than chunk downloads: a
worker that registers a relay URL pointing at its own server collects broadcast credentials, which it
already has. A fourth, the *viewer credential* ``HMAC-SHA256(run token, "echo2 dashboard")``, reads
the live dashboard's data (``/v1/dashboard``, which also takes the run token) and nothing else; no
session credential opens that route.

*Credential first, body capped while it streams* (``guard.Guard``, a pure ASGI middleware on the
coordinator and on every relay). Before the app runs, the credential a path needs is checked (run
token for ``/v1/register``, broadcast credential for ``/v1/broadcast/...``, viewer credential or run
token for ``/v1/dashboard``, a known session for everything else, routes of a work's own — the
gateway's, a training service's — with their own keys (``guard.Door``); ``/v1/health``, the API schema
and the dashboard's static page are open) and a refusal is a 401 sent at once, with
``Connection: close``: an anonymous client cannot make the server read, parse or validate a byte of
its body (a 429 past a rate limit is held a moment before it is sent, ``guard.TARPIT_S``, so a client
that ignores ``Retry-After`` cannot ask as fast as the server answers). ``Content-Length`` over the
limit (16 MiB on the coordinator, 1 KiB on relays, whose routes take no body) is a 413 at once; a
body without one (chunked) is counted as the app reads it and cut with a 413 at the limit, the
connection closed rather than drained. Whether the session's worker is alive, quarantined or owns the
lease is then decided by the handler, under the state's lock.

*Deadlines and a registration allowance* (slow loris, floods). Every request head must arrive within
``limits.head_timeout_s`` (10 s; ``deadlines.HeadDeadlineProtocol``, uvicorn's h11 protocol with a
timer armed when a connection opens and after each response; relays the same) and every body within
``limits.body_timeout_s`` of its head (60 s; ``guard.Guard``), else 408 and the connection is closed.
A long-poll lease is not cut: the deadline is the head's and the body's, not the handler's.
Registrations are limited per client address (``ratelimit.RateLimiter``, a token bucket:
``limits.registrations_burst``, at least ``workers.count``, then ``registrations_per_minute``),
checked with the run token before the body is read; past it a 429 with ``Retry-After``, which workers
honour within their retry budget.

*Relay URLs* are checked at registration: ``http(s)://host:port``, nothing else (no user, path, query
or fragment; 422 with the reason). A TLS run refuses ``http://`` relays.

*TLS* (``coordinator.tls_certfile``/``tls_keyfile``, uvicorn's ssl options, loaded when the server is
built so a bad path fails at once): the coordinator's URL becomes ``https://``. Workers verify it
with ``--ca-file`` (a CA bundle, host name checked) or ``--pin-sha256`` (the certificate's SHA-256,
for self-signed setups: no CA, no host name; ``tls.PinnedContext`` checks it during the handshake);
neither means the system trust store. A worker's relay serves TLS with ``--relay-certfile``/
``--relay-keyfile``, and peers check relays exactly as they check the coordinator (pin every
certificate your relays serve, or use a CA). A failed check happens before any request, so no
credential reaches an impostor: the client gives up at once (``CoordinatorUntrusted``) instead of
retrying; the downloader drops that source for the next. Local workers of a TLS run pin the
coordinator's certificate and serve their relays with the same pair. Chunks are verified against the
hashes the coordinator announces whatever the transport, so TLS on relays protects the broadcast
credential and the weights' confidentiality, not their integrity.

*Files others can read*: ``RUN_DIR/config.yaml`` shows ``coordinator.token: <redacted>`` (the token
stays in the owner-only ``RUN_DIR/token`` and ``coordinator.json``, where ``--resume`` and a redacted
config find it); ``echo2 report`` redacts it in older configs too; the learner's and the workers' log
handlers carry ``redact.RedactSecrets``, which replaces the run token, the broadcast credential (the
learner's, the viewer credential too) and anything shaped like a session credential with
``<redacted>``.
"""
