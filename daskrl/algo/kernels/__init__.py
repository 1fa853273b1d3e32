"""Hand-written fast paths of the learner (an MLP actor-critic's minibatch gradients written out, its parameters in one
flat buffer, an Adam step without torch's wrapper), each tested against the plain torch reference. A trainer takes
them through :class:`~daskrl.algo.kernels.fast_paths.FastPaths` (``--learner-kernels auto``), the one module that
imports the others for it: with ``off`` none is loaded."""
