"""energy-index: the ML.ENERGY Leaderboard's measurements as a DuckDB database and an energy index."""
