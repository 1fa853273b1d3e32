"""The data-parallel learner group (--num-learners K): each learner's place in it (the leader splits each batch into
shares and publishes; members train on theirs), and the torch.distributed group they train with.
"""
