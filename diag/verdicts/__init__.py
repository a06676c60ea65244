"""The verdicts: regressions across runs and builds (``regress``, ``timing_change``), the gate that
picks what to compare (``gate``) and its JUnit file (``junit``), variant against variant
(``variants``, ``race``) and why one is slower (``why``). The statistics they use and what makes one
measurement noisy are below them (``diag/stats.py``, ``diag/noise.py``): a run is judged noisy where
it is assembled, and the store keeps its verdicts' deciding runs (``diag/row.py``) without asking here."""
