"""``echo2 report``: a self-contained HTML report of a real or simulated run directory.

* ``data.py`` — what a run directory holds, read (metrics, timeline, reliability, the redacted config);
* ``figures.py`` — every drawing of a run (the PNGs a run leaves and the report's figures);
* ``html.py`` — the one self-contained HTML file;
* ``live.py`` — a run directory read while the learner writes it (for the live dashboard).
"""
