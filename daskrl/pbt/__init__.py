"""Population-based training (``--pbt``): the population's rules (:mod:`.population`), the controller component that
decides each round (:mod:`.controller`), and the runner's side that carries the decisions out (:mod:`.driver`)."""
