"""Distribution that is not one backend's: how a pipeline scales with the world, batch norm across
ranks, the preflight of many hosts over ssh, and one whole line per rank on stdout.

Backends (in `backends/`) place variables and reduce gradients; what every backend shares about
ranks and hosts lives here, below the engine, and names no backend.
"""
