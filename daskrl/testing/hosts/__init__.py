"""Hosts and clusters made of real parts on this one machine, for tests and benchmarks (root, Linux): network
namespaces joined by a bridge (:mod:`.netns`), the daemons that run in them (:mod:`.daemons`), a SLURM cluster of
slurmctld, munged and one slurmd per node (:mod:`.slurm`) and SSH hosts each running sshd (:mod:`.ssh`). Each is
started and stopped by the code that needs it, and leaves nothing behind: daemons are stopped by pid, the namespaces
deleted, and the next kit removes what a killed owner left.
"""
