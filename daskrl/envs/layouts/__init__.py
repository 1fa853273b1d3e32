"""What an env's spaces are and how each kind of observation and action lies in a slot's rows: the plain space
description, Tuple and Dict actions as one flat row, Dict observations as packed records, discrete observations,
and the spaces a multi-agent env's agents share.
"""
