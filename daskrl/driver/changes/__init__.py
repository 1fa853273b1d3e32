"""The cluster changing under a run: lost components brought back (:mod:`.recovery`), workers that leave in order
(:mod:`.departures`), workers that retire when they said they would and the learners that move off them
(:mod:`.retirements`), workers that join (:mod:`.elastic`); whether the fleet is fixed or follows the cluster,
chosen once per run (:mod:`.fleet_sizing`)."""
