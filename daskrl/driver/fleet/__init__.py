"""Who runs what: which worker gets which component (:mod:`.placement`), each role's setup (:mod:`.role_setups`), the
live components by role (:mod:`.fleet`) and where a learner starts from (:mod:`.learner_start`), a parameter relay per
host (:mod:`.relays`), the replay shards' hosts (:mod:`.replay_hosts`), each policy's books (:mod:`.policies`), and
what each algorithm of ``--algo`` is made of (:mod:`.algorithms`)."""
