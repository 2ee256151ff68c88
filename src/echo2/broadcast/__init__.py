"""Moving policy weights from the learner to the workers.

* :mod:`payload` — a model's parameters as safetensors bytes (torch);
* :mod:`manifest` — a payload cut into hashed chunks, described by a manifest;
* :mod:`chunk_store` — what a node holds of the newest versions, with long-poll waits;
* :mod:`throttle` — a node's upload cap, shared by all it sends;
* :mod:`relay` — the HTTP routes serving a store (on the coordinator: the root source) and a
  standalone relay server for workers;
* :mod:`topology` — who fetches from whom (chains by default, star as baseline);
* :mod:`downloader` — fetching a version down a fallback chain of sources;
* :mod:`node` — a standalone node process (what ``bench/broadcast.py`` spawns).

Nothing is imported here, so that relays and downloaders never pull in torch.
"""
