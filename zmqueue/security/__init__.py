"""The front door: CURVE keys and the ZAP handler, authorization policies,
rate limits, encryption at rest, usage records. Pure building blocks: the
host and the client wire them in (docs/SECURITY.md)."""
