"""The verdicts: regressions across runs and builds (``regress``, ``timing_change``, ``stats``,
``noise``), the gate that picks what to compare (``gate``) and its JUnit file (``junit``), and
variant against variant (``variants``, ``race``)."""
