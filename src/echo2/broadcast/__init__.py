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
"""
