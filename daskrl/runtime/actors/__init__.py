"""Components: Dask actors with their own thread, the signals and slots they declare, the driver's handles on them,
where their time goes, and the failures they survive on purpose.
"""
