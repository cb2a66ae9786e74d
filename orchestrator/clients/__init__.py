"""The clients' side of a round: the typed calls, a host of logical clients and what a run asks of it, the engines that train them, their data, work and states, the partial sums they send."""
