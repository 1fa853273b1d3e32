"""What runs on every Dask worker: the plugin daskrl installs, the forkserver that imports torch once, and the
preload modules around its imports.
"""
