"""The figures of a run (one line per policy where several train), shared by the live dashboard page and the HTML
report.
"""
