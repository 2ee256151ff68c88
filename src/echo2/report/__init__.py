"""``echo2 report``: a self-contained HTML report of a real or simulated run directory."""
