"""When the driver's loop reads the run: on a clock, sooner near a stop (:mod:`.poll_pace`), or once per training
step while the learner holds it (:mod:`.lockstep`, ``--deterministic``)."""
