"""diag: compile diagnostics and regression tracking for torch.compile."""

__version__ = "0.1.0"
