"""inductor swallows an exception inside a lowering that succeeds, and logs it at DEBUG only."""

import logging

from diag.probe.cases import case

import _lowering


@case("lowering_debug", "inductor logs a swallowed exception at DEBUG only while lowering")
def generate(gen):
    _lowering.generate(gen, logging.DEBUG)
