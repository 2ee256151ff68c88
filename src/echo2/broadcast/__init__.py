"""Moving policy weights from the learner to the workers: ECHO-2's peer-assisted pipelined broadcast.

* ``payload.py`` — a model's parameters (all, or a LoRA adapter's only) as safetensors bytes,
  optionally bf16 on the wire; ``integrity.py`` the sha256 check every payload passes;
* ``bundle.py`` — a training service's version: every sampler adapter its clients may still
  sample from, one payload, and the byte runs that rebase the bundle before to its layout;
* ``manifest.py`` — a payload cut into hashed chunks, described by a manifest;
  ``chunk_store.py`` what a node holds of the newest versions, with long-poll waits;
* ``relay.py`` — the ``/v1/broadcast`` routes serving a store (the learner's: the root source;
  every worker's relay); ``throttle.py`` a node's upload cap and added latency (WAN emulation);
* ``topology.py`` — the relay planner: per version, each worker's source chain
  ``[parent, ..., learner]``, fastest uplinks first, the previous order kept unless an uplink is
  clearly faster;
* ``downloader.py`` — fetching a version chunk by chunk down its source chain (its rules:
  ``core/fetch_chain.py``), failing over without losing verified chunks; ``errors.py`` how a fetch
  fails as its caller sees it; ``source_failure.py`` why one source failed one request;
* ``suspects.py`` — the relays a node could not reach lately (skipped a while, longer each time
  they fail again) and those it left for their rate (reported to the coordinator);
* ``publisher.py`` — the learner's side: serialise, chunk, serve, plan, and each version's delta;
* ``delta.py`` — lossless deltas between consecutive versions (XOR, byte shuffle, zstd);
  ``delta_fetch.py`` a worker's rebuild from the version it holds, or the full version.

Nothing is imported here, so that relays and downloaders never pull in torch.

**Weight dissemination (ECHO-2's peer-assisted pipelined broadcast).** On publish the learner
serialises the policy (``broadcast.dtype``: float32 or bf16), cuts it into ``broadcast.chunk_mib``
chunks each with a sha256, and serves manifest and chunks under ``/v1/broadcast/{v}/...`` (broadcast
credential required; ``emulation.learner_upload_mbps`` caps its upload). It keeps the last S + 2
versions' chunks (:func:`echo2.core.staleness.versions_in_use`), since a version S steps old can still
produce fresh groups.

The coordinator plans, per version, who fetches from whom among the live workers (``broadcast.mode``:
``pipelined`` chains/trees with ``fan_out``, or ``star``: ``topology.py``, kept per version by
``coordinator/versions.py``); ``GET /v1/version`` gives each worker its source chain ``[parent relay,
grandparent, ..., "learner"]``. Workers registered with ``--no-relay`` are only ever leaves, and so is
a worker whose advertised relay has not answered the coordinator's check as that worker
(``coordinator/relay_check.py``: behind NAT, a private or wrong address); it still leases, fetches and
submits, all outbound. A relay advertised on a loopback or link-local address serves only workers
that reached the coordinator from the same address (the plan's ``site``/``scope``): no worker on
another host is ever sent to its own loopback.

Every worker runs a relay that serves the chunks it holds for its current and previous version and
answers a request for a chunk it does not hold yet by waiting for it (long-poll): chunks flow down a
chain as they arrive. A version it will never hold is refused at once (404 ``evicted``): one older
than those it keeps, or one it skipped (it holds, or has set out to fetch, a newer one but not this;
the missing chunks of a version it abandoned for a newer one too). The plan is made per version, so
relays on different versions may ask each other: refusing as soon as a fetch of a newer version
starts (``ChunkStore.receive``), not once its manifest is in, keeps two relays from long-polling each
other until a stall timeout breaks the cycle. Such a version is outdated, so the child's fetch stops
at once (``VersionSuperseded``) and the worker asks for the newest version right away, from its
parent again: pulling the outdated version from the learner instead would share the learner's uplink
with the chain's head, halve both transfers on a capped uplink and keep the child behind for good (a
held-out run at 8 Mbit/s was clearly slower per step that way). Each chunk is verified on arrival; a
corrupt chunk, a dead or stalled source moves the remaining chunks to the next source in the chain;
verified chunks are kept. A version is loaded only when the whole payload matches the announced
sha256.

**Relays are judged by rate, not by progress** (``core/fetch_chain.py`` ``too_slow``). A relay that
answers and trickles bytes makes progress at every read; one sending ~1 B/s while declaring 1e12 B/s
had held its child, every node below it, and then the learner's data. ``GET /v1/version`` gives each
relay of the chain with the rate the coordinator plans it at (``source_rates``: its own word, or less
where a peer measured less). Its floor is a tenth of that rate, and never under 16 kB/s
(``fetch_chain.rate_floor``); once a chunk's transfer has run the chunk's time at the floor plus 2 s
of slack (``broadcast.stall_s`` if that is sooner), a rate below the floor moves the chunk to the next
source. The node skips that relay for 300 s (``suspects.py``) and reports it with the rate it measured
in its next heartbeat (``slow_sources``); the coordinator then takes it out of every chain at once,
this version's too, and plans it as a leaf at the measured rate for 300 s, four times longer at each
further demotion (``coordinator/registry.py`` ``demote_relay``). A report counts only for a relay of
the reporter's own chains: a worker can demote a relay it was sent to, not any it names. A relay
reported silent (no byte at all) is not taken out on the reporter's word: a cut link looks the same,
so the coordinator asks it for a chunk itself and takes it out only if it is silent there too.

**Dissemination latency** (publish → the moment every active worker holds the version or a newer one,
``core/dissemination.py``; the simulator counts with the same rule) is logged per version
(``dissemination_s``, ``dissemination_max_s``) and drawn on the timeline (row ``broadcast``).

**Delta versions** (``broadcast.encoding: delta``, the default): the publisher also encodes each
version as a lossless delta from the one before (``delta.py``: XOR of the two payloads' bytes, byte
shuffle by word position, zstd; the header names the base's and the result's sha256) and serves it
from a second store under ``/v1/broadcast/delta/{v}/...``; ``GET /v1/version`` announces
``delta_sha256`` beside ``sha256``. A worker holding ``v - 1`` fetches the delta down the same source
chain (its relay serves both stores), applies it, checks the result against the announced ``sha256``,
and also cuts it into its full store, so a child that falls back can fetch the full version from it.
A worker a few versions behind catches up by the deltas in between, applied in turn and each checked
against its version's hash, when together they are smaller than the version: ``GET /v1/version``
lists the kept versions before the current one with their deltas (``catch_up``); a delta on the way
that its relay skipped comes from the learner. Without that, a worker that once skipped a version
fetched every later one whole, and on a link that carries a whole version more slowly than versions
come, it never caught up (seen on the lab's capped links). A worker that holds none of those
versions, or whose delta fails in any way, fetches the full version (``delta_fetch.py``). Workers
report fetches rebuilt from deltas (``worker/<name>/delta_fetches``); the learner logs
``delta_bytes`` and ``delta_encode_s`` per step.
"""
