"""Segments: discovery, the multicalibration audit and per-segment fixes."""
