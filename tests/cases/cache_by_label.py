"""A model file whose KV cache hangs on how ``packaging`` reads a version label that is not PEP 440.

The file was written against packaging 21, where ``version.parse`` accepted any string (a
``LegacyVersion``): its fork's label (``2.1-fixedcache``) selects the fork's fixed-size cache, which
appends in the last slot (append_last: fullgraph holds). packaging 22.0 dropped ``LegacyVersion``, and
``parse`` raises ``InvalidVersion`` on such a label; the file then takes the upstream cache, sliced to
a tensor-valued length before attention (dynamic_slice: fullgraph fails). torch and the case are the
same on both sides: only packaging moved, and ``diag bisect --package packaging=...`` finds the
release.
"""

from diag.cases import append_last, dynamic_slice
from diag.probe.cases import case

LABEL = "2.1-fixedcache"


def fork_cache() -> bool:
    from packaging import version

    try:
        version.parse(LABEL)
    except version.InvalidVersion:
        return False
    return True


@case("cache_by_label", "append_last where packaging reads the fork's label, else dynamic_slice")
def generate(gen):
    (append_last if fork_cache() else dynamic_slice).generate(gen)
