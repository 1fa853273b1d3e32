"""From an observation to a feature vector: the observation adapter, the encoders by name (MLP, the CNNs, the IMPALA
ResNet, one per Dict key), image frames as a convolution's input, and the activations an MLP is built with.
"""
