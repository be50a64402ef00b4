"""Acceleration: torch.compile and CUDA graphs of the hot steps, profiling, memory habits."""
