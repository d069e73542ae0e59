"""TF1-style scripts written for this project's compat tests, and their data helper."""
