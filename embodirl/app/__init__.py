"""The application: the composition root (config -> a ready trainer) and the run's lifecycle."""
