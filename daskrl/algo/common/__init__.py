"""What the algorithms share: the trainer base (weights, checkpoints, hyperparameters), the off-policy update loop over
a request's minibatches, running normalizers, optimizers (Adam, AdamW, LAMB), learning-rate schedules, the
collectives of a learner group, and the plain torch update (``--learner-kernels off``)."""
