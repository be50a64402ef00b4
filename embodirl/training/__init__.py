"""The training loop and what it drives: stopping, callbacks, loggers, console, videos."""
