"""From a matrix to storable runs: which cases (``catalog``), the matrix and its shares (``matrix``,
``shard``), executing its parts (``execute``), what a run needs (``preflight``), the probe processes
(``runner``, ``spawn``, ``parents``), and what a run directory holds (``rundir``, ``trace``,
``artifacts``) made into one storable run (``assemble``, ``measured``, and ``profile``: what a
profiled run keeps of its generations)."""
