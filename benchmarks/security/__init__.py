"""Security benchmarks: the cost of CURVE and of encryption at rest."""
