"""Reaching a cluster: an embedded one or someone else's, and the runs that share it."""
