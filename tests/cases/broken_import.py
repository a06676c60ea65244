"""A case file whose import fails: diag must say so in one line, before any run."""

import a_module_that_does_not_exist  # noqa: F401 (the failing import is what this case is for)

from diag.probe.cases import case


@case("broken_import", "cannot be imported")
def generate(gen):
    raise AssertionError("never reached")
