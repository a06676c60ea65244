"""inductor swallows an exception inside a lowering that succeeds, and logs it at WARNING."""

import logging

from diag.probe.cases import case

import _lowering


@case("lowering_warning", "inductor logs a swallowed exception at WARNING while lowering")
def generate(gen):
    _lowering.generate(gen, logging.WARNING)
