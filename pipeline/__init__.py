"""energy-index: the ML.ENERGY Leaderboard's measurements as a DuckDB database and an energy index."""

# The one place the version is stated: pyproject.toml reads it (dynamic), and so does --version without
# asking the installed package's metadata (importlib.metadata alone costs as much as Python's start).
__version__ = "0.1.0"
