"""The Spark backend: one barrier-stage task per cluster task."""
