"""The performance benchmark: reference systems, a bounded cluster runner, measurements, reports."""
